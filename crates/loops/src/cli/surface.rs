//! The three front ends define loops with the same settings: every flag of `loops
//! create command|agent|workflow` and `loops edit` (from the clap definition) is a
//! field of the MCP tool that does the same (`loops_create_*`, `loops_edit`, from the
//! tools' input schemas) and a place in the HTTP API's definition document
//! (`LoopDefinitionBody` and its target, from the OpenAPI document), through the one
//! table [`SETTINGS`]. A flag added to `create` without its MCP field, its API place
//! or its `edit` flag fails here; so does an MCP field that no row names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// One setting on the three surfaces: the CLI's long flag (`<id>` for a positional
/// argument), the MCP tools' field, and its path in the API's definition document:
/// `target.…` within the target of the loop's type, `schedule.…` within one of the
/// schedule's kinds, else within `LoopDefinitionBody`. `""` where a surface has no
/// such setting: [`NOT_ON`] says why.
struct Setting {
    cli: &'static str,
    mcp: &'static str,
    api: &'static str,
}

const fn row(cli: &'static str, mcp: &'static str, api: &'static str) -> Setting {
    Setting { cli, mcp, api }
}

/// Global flags (`--json`, `--data-dir`, `--store`) are not a loop's definition:
/// they are left out, as clap's `--help`.
const SETTINGS: &[Setting] = &[
    // The loop.
    row("<name>", "name", "name"),
    row("<loop>", "loop", ""),
    row("description", "description", "description"),
    row("label", "labels", "labels"),
    row("unlabel", "unlabel", ""),
    row("on", "on", "runsOn"),
    row("preflight", "preflight", "preflight"),
    row("clear", "clear", ""),
    // The schedule.
    row("at", "at", "schedule.at"),
    row("every", "every", "schedule.everyMs"),
    row("cron", "cron", "schedule.expression"),
    row("dynamic", "dynamic", "schedule.minIntervalMs"),
    row("tz", "tz", "schedule.timezone"),
    row("anchor", "anchor", "schedule.anchor"),
    // The policy.
    row("catch-up", "catchUp", "catchUp"),
    row("catch-up-limit", "catchUpLimit", "catchUpLimit"),
    row("overlap", "overlap", "overlap"),
    row("attempts", "attempts", "maxAttempts"),
    row("retry-delay", "retryDelay", "retryDelayMs"),
    row("retry-backoff", "retryBackoff", "retryBackoff"),
    row("retry-delay-max", "retryDelayMax", "retryDelayMaxMs"),
    row("max-failures", "maxFailures", "maxFailures"),
    row("until-cmd", "untilCmd", "untilCmd"),
    row("until-output", "untilOutput", "untilOutput"),
    row("max-runs", "maxRuns", "maxRuns"),
    row("budget-tokens", "budgetTokens", "budgetTokens"),
    row("budget-usd", "budgetUsd", "budgetUsd"),
    row("lease", "lease", "leaseMs"),
    row("expires-at", "expiresAt", "expiresAt"),
    row("jitter", "jitter", "jitterMs"),
    // Notifications.
    row("notify-cmd", "notifyCmd", "notify.cmd"),
    row("notify-url", "notifyUrl", "notify.url"),
    row("notify-on", "notifyOn", "notify.on"),
    // Every target's.
    row("cwd", "cwd", "target.cwd"),
    row("timeout", "timeout", "target.timeoutMs"),
    row("idle-timeout", "idleTimeout", "target.idleTimeoutMs"),
    row("env", "env", "target.env"),
    row("unset-env", "unsetEnv", ""),
    row("account", "account", "target.account.profile"),
    row("account-tool", "accountTool", "target.account.tool"),
    // A command's.
    row("cmd", "cmd", "target.command"),
    row("no-shell", "noShell", "target.shell"),
    row("shell", "shell", "target.shell"),
    row("<args>", "args", "target.args"),
    // An agent's.
    row("provider", "provider", "target.provider"),
    row("prompt", "prompt", "target.prompt"),
    row("prompt-file", "promptFile", "target.promptFile"),
    row("model", "model", "target.model"),
    row("agent", "agent", "target.agent"),
    row("auth-profile", "authProfile", "target.authProfile"),
    row(
        "config-isolation",
        "configIsolation",
        "target.configIsolation",
    ),
    row(
        "config-override",
        "configOverrides",
        "target.configOverrides",
    ),
    row("session", "session", "target.session"),
    row("account-pool", "accountPool", "target.accountPool"),
    row("permission-mode", "permissionMode", "target.permissionMode"),
    row("sandbox", "sandbox", "target.sandbox"),
    row("effort", "effort", "target.effort"),
    row("variant", "variant", "target.variant"),
    row("add-dir", "addDirs", "target.addDirs"),
    row("max-turns", "maxTurns", "target.maxTurns"),
    row("allow-tool", "allowTools", "target.allowTools"),
    row("deny-tool", "denyTools", "target.denyTools"),
    // A workflow's.
    row("workflow", "workflow", "target.workflow"),
    row("param", "params", "target.params"),
    row("unset-param", "unsetParams", ""),
];

/// Why a setting is not on a surface (`"api"`), or not for one target type's
/// definition in the API (`"api workflow"`). Every `""` of [`SETTINGS`] and every
/// path a target's schema lacks is here.
const NOT_ON: &[(&str, &str, &str)] = &[
    (
        "<loop>",
        "api",
        "the loop an edit changes is the URL's (`PATCH /v1/loops/{key}`)",
    ),
    (
        "unlabel",
        "api",
        "a PATCH is a JSON merge patch of the document: labels are given whole",
    ),
    (
        "unset-env",
        "api",
        "a PATCH is a JSON merge patch: `null` removes an env key",
    ),
    (
        "unset-param",
        "api",
        "a PATCH is a JSON merge patch: `null` removes a param's value",
    ),
    (
        "clear",
        "api",
        "a PATCH is a JSON merge patch: `null` clears a setting",
    ),
    (
        "idle-timeout",
        "api workflow",
        "refused for workflow loops (a workflow's steps take idleTimeoutMs in the spec)",
    ),
    (
        "cwd",
        "api workflow",
        "refused for workflow loops (a workflow's steps take cwd in the spec)",
    ),
    (
        "env",
        "api workflow",
        "refused for workflow loops (a workflow's steps take env in the spec)",
    ),
    (
        "account",
        "api workflow",
        "refused for workflow loops (a workflow's steps take account in the spec)",
    ),
    (
        "account-tool",
        "api workflow",
        "refused for workflow loops (a workflow's steps take account in the spec)",
    ),
];

/// `create` flags that `edit` does not take, and why.
const CREATE_ONLY: &[(&str, &str)] = &[(
    "<name>",
    "`edit` names the loop it changes (`<loop>`); `loops rename` renames it",
)];

/// `create`'s subcommands: the MCP tool that does the same, and the API's schema of
/// the target.
const CREATE: &[(&str, &str, &str)] = &[
    ("command", "loops_create_command", "CommandBody"),
    ("agent", "loops_create_agent", "AgentTarget"),
    ("workflow", "loops_create_workflow", "WorkflowTarget"),
];

/// The long flags (`<id>` for positionals) of a clap command, not the global ones nor
/// clap's own.
fn cli_flags(command: &clap::Command) -> BTreeSet<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .map(|a| match a.get_long() {
            Some(long) => long.to_owned(),
            None => format!("<{}>", a.get_id()),
        })
        .collect()
}

fn cli_command(path: &[&str]) -> clap::Command {
    let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
    for name in path {
        command = command
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("no subcommand {name:?} in {path:?}"))
            .clone();
    }
    command
}

/// The input fields of each MCP tool, by the tool's name.
fn mcp_fields() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let server = loops_mcp::LoopsMcp::new(loops_mcp::Options {
        data_dir: "/nonexistent/loops-data".into(),
        store: None,
        allow_mutations: false,
        allow_code: false,
        allow_secrets: false,
        base_dir: "/".into(),
    });
    server
        .tools()
        .iter()
        .map(|tool| {
            let tool = serde_json::to_value(tool).unwrap();
            let fields = tool["inputSchema"]["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            (tool["name"].as_str().unwrap().to_owned(), fields)
        })
        .collect()
}

/// Whether `schema` has the property path (following `$ref`, `oneOf`, `allOf`).
fn has_path(schemas: &Map<String, Value>, schema: &Value, path: &[&str]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return true;
    };
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        return has_path(schemas, &schemas[name], path);
    }
    let branches = ["oneOf", "allOf", "anyOf"]
        .iter()
        .filter_map(|k| schema[*k].as_array())
        .flatten();
    for branch in branches {
        if has_path(schemas, branch, path) {
            return true;
        }
    }
    schema["properties"]
        .get(*first)
        .is_some_and(|p| has_path(schemas, p, rest))
}

fn row_of<'a>(cli: &str) -> Option<&'a Setting> {
    SETTINGS.iter().find(|s| s.cli == cli)
}

fn reason(cli: &str, surface: &str) -> Option<&'static str> {
    NOT_ON
        .iter()
        .find(|(c, s, _)| *c == cli && *s == surface)
        .map(|(_, _, why)| *why)
}

/// Every flag of `create` and `edit` has a row, the row's MCP field is the tool's, and
/// the tool has no field that the command's rows do not name.
fn check_flags(cli: &BTreeSet<String>, what: &str, tool: &str, tool_fields: &BTreeSet<String>) {
    let mut named = BTreeSet::new();
    for flag in cli {
        let row = row_of(flag).unwrap_or_else(|| {
            panic!("{what}'s {flag} has no row in SETTINGS (its MCP field and API path)")
        });
        if row.mcp.is_empty() {
            assert!(
                reason(flag, "mcp").is_some(),
                "{what}'s {flag}: no MCP field and no reason in NOT_ON"
            );
            continue;
        }
        assert!(
            tool_fields.contains(row.mcp),
            "{what}'s {flag}: {tool} has no field {:?}",
            row.mcp
        );
        named.insert(row.mcp.to_owned());
    }
    let unnamed: Vec<_> = tool_fields.difference(&named).collect();
    assert!(
        unnamed.is_empty(),
        "{tool} has fields no flag of {what} names in SETTINGS: {unnamed:?}"
    );
}

#[test]
fn create_and_edit_have_the_same_settings_on_the_cli_mcp_and_the_api() {
    let tools = mcp_fields();
    let doc: Value = serde_json::from_str(&loops_http::openapi_json()).unwrap();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let body = &schemas["LoopDefinitionBody"];
    assert!(
        body.is_object(),
        "no LoopDefinitionBody in the OpenAPI document"
    );

    let edit_cli = cli_flags(&cli_command(&["edit"]));
    let edit_tool = &tools["loops_edit"];
    check_flags(&edit_cli, "loops edit", "loops_edit", edit_tool);

    for (kind, tool, target_schema) in CREATE {
        let what = format!("loops create {kind}");
        let cli = cli_flags(&cli_command(&["create", kind]));
        let tool_fields = tools
            .get(*tool)
            .unwrap_or_else(|| panic!("no MCP tool {tool}"));
        check_flags(&cli, &what, tool, tool_fields);
        assert!(
            schemas["TargetBody"]
                .to_string()
                .contains(&format!("#/components/schemas/{target_schema}")),
            "TargetBody has no {target_schema}"
        );
        let target = &schemas[*target_schema];

        for flag in &cli {
            let row = row_of(flag).unwrap();
            // The API's place.
            let path: Vec<&str> = row.api.split('.').collect();
            let found = match path.as_slice() {
                [""] => reason(flag, "api").is_some(),
                ["target", rest @ ..] => has_path(schemas, target, rest),
                _ => has_path(schemas, body, &path),
            };
            assert!(
                found || reason(flag, &format!("api {kind}")).is_some(),
                "{what}'s {flag}: the API's definition document has no {:?} (nor a reason in NOT_ON)",
                row.api
            );
            // The same flag on `edit`, by the CLI and by MCP.
            if CREATE_ONLY.iter().any(|(c, _)| c == flag) {
                continue;
            }
            assert!(
                edit_cli.contains(flag),
                "{what}'s {flag} is not a flag of `loops edit` (nor in CREATE_ONLY)"
            );
            assert!(
                row.mcp.is_empty() || edit_tool.contains(row.mcp),
                "{what}'s {flag}: loops_edit has no field {:?}",
                row.mcp
            );
        }
    }

    // Every "" of the table has its reason.
    for s in SETTINGS {
        for (surface, name) in [("mcp", s.mcp), ("api", s.api)] {
            assert!(
                !name.is_empty() || reason(s.cli, surface).is_some(),
                "{}: no {surface} place and no reason in NOT_ON",
                s.cli
            );
        }
    }
}

/// The table is no wider than the surfaces: each row's flag is a flag of `create` or
/// `edit`, and each reason is for a row.
#[test]
fn every_row_and_reason_is_for_a_flag() {
    let mut all = cli_flags(&cli_command(&["edit"]));
    for (kind, _, _) in CREATE {
        all.extend(cli_flags(&cli_command(&["create", kind])));
    }
    for s in SETTINGS {
        assert!(
            all.contains(s.cli),
            "SETTINGS names {}, a flag of neither create nor edit",
            s.cli
        );
    }
    for (cli, _, _) in NOT_ON {
        assert!(
            row_of(cli).is_some(),
            "NOT_ON names {cli}, which has no row"
        );
    }
}
