//! Provider options: the agent CLIs' own switches a loop may set (`--permission-mode`,
//! `--sandbox`, `--effort`, `--variant`, `--add-dir`, `--max-turns`, `--allow-tool`,
//! `--deny-tool`). [`TABLE`] is the one place that decides which provider has which
//! option, which values it accepts and what argv each becomes; validation
//! ([`validate`]) and the adapters (`loops_runtime::providers`, through [`argv`]) read
//! nothing else.
//!
//! Every row was read from the CLI our e2e tests install (claude 2.1.332, codex
//! 0.171.0, opencode 1.18.33): `claude --help` (`--max-turns` is a hidden option of
//! 2.1.332: "Stop after this many turns (only works with --print)"), `codex exec
//! --help` (`model_reasoning_effort` is a `-c` key; its values are the levels codex's
//! model catalog lists), `opencode run --help` (`--variant`: "provider-specific
//! reasoning effort", so any word). cursor, codewith and aicopilot have no row: there
//! is no evidence their CLIs have any of these options (codewith's `--sandbox
//! workspace-write` is codex's default, passed as it is).
//!
//! Effort and variant are two options, not one: claude's and codex's `--effort` take a
//! closed list of levels; opencode's `--variant` names one of the model's variants,
//! whatever its provider calls them.

use crate::validate::{no_controls, Lines, ValidationError};
use crate::{limits, AgentTarget, Provider};
use std::path::Path;

/// One provider option, as a loop definition names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderOption {
    PermissionMode,
    Sandbox,
    Effort,
    Variant,
    AddDir,
    MaxTurns,
    AllowTool,
    DenyTool,
}

impl ProviderOption {
    /// Every option, in the order their argv is built and shown.
    pub const ALL: [ProviderOption; 8] = [
        Self::PermissionMode,
        Self::Sandbox,
        Self::Effort,
        Self::Variant,
        Self::AddDir,
        Self::MaxTurns,
        Self::AllowTool,
        Self::DenyTool,
    ];

    /// The `create`/`edit` flag.
    pub fn flag(self) -> &'static str {
        match self {
            Self::PermissionMode => "--permission-mode",
            Self::Sandbox => "--sandbox",
            Self::Effort => "--effort",
            Self::Variant => "--variant",
            Self::AddDir => "--add-dir",
            Self::MaxTurns => "--max-turns",
            Self::AllowTool => "--allow-tool",
            Self::DenyTool => "--deny-tool",
        }
    }

    /// The agent target's JSON field.
    pub fn field(self) -> &'static str {
        match self {
            Self::PermissionMode => "permissionMode",
            Self::Sandbox => "sandbox",
            Self::Effort => "effort",
            Self::Variant => "variant",
            Self::AddDir => "addDirs",
            Self::MaxTurns => "maxTurns",
            Self::AllowTool => "allowTools",
            Self::DenyTool => "denyTools",
        }
    }

    /// What `edit --clear` calls it.
    pub fn clear_name(self) -> &'static str {
        match self {
            Self::PermissionMode => "permission-mode",
            Self::Sandbox => "sandbox",
            Self::Effort => "effort",
            Self::Variant => "variant",
            Self::AddDir => "add-dirs",
            Self::MaxTurns => "max-turns",
            Self::AllowTool => "allow-tools",
            Self::DenyTool => "deny-tools",
        }
    }

    /// How `show` and the dashboard name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::PermissionMode => "permission mode",
            Self::Sandbox => "sandbox",
            Self::Effort => "effort",
            Self::Variant => "variant",
            Self::AddDir => "add dirs",
            Self::MaxTurns => "max turns",
            Self::AllowTool => "allow tools",
            Self::DenyTool => "deny tools",
        }
    }

    /// The options `t` sets, each with its values (for `show` and the dashboard).
    pub fn set_on(t: &AgentTarget) -> Vec<(ProviderOption, Vec<String>)> {
        Self::ALL
            .into_iter()
            .map(|option| (option, option.values(t)))
            .filter(|(_, values)| !values.is_empty())
            .collect()
    }

    /// The values `t` sets for this option (none when unset; several for the
    /// repeatable ones).
    pub fn values(self, t: &AgentTarget) -> Vec<String> {
        let one = |v: &Option<String>| v.iter().cloned().collect();
        match self {
            Self::PermissionMode => one(&t.permission_mode),
            Self::Sandbox => one(&t.sandbox),
            Self::Effort => one(&t.effort),
            Self::Variant => one(&t.variant),
            Self::AddDir => t.add_dirs.clone(),
            Self::MaxTurns => t.max_turns.iter().map(u32::to_string).collect(),
            Self::AllowTool => t.allow_tools.clone(),
            Self::DenyTool => t.deny_tools.clone(),
        }
    }

    /// Unsets this option on `t` (`edit --clear`).
    pub fn clear(self, t: &mut AgentTarget) {
        match self {
            Self::PermissionMode => t.permission_mode = None,
            Self::Sandbox => t.sandbox = None,
            Self::Effort => t.effort = None,
            Self::Variant => t.variant = None,
            Self::AddDir => t.add_dirs.clear(),
            Self::MaxTurns => t.max_turns = None,
            Self::AllowTool => t.allow_tools.clear(),
            Self::DenyTool => t.deny_tools.clear(),
        }
    }
}

/// Which values an option accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Exactly one of these (the CLI's own list).
    OneOf(&'static [&'static str]),
    /// A name: letters, digits, `.`, `_`, `-`, not starting with `-`.
    Word,
    /// An absolute directory (front ends resolve relative ones, as for `--cwd`).
    Dir,
    /// A count, at least 1.
    Count,
    /// A tool rule (`Bash(git:*)`, `WebFetch`): one line, not starting with `-`.
    ToolRule,
}

/// How one value becomes argv words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Argv {
    /// `FLAG VALUE`, once per value.
    Flag(&'static str),
    /// `-c KEY=VALUE` (codex's configuration override).
    Config(&'static str),
}

/// One row of the table: `provider` has `option`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    pub provider: Provider,
    pub option: ProviderOption,
    pub values: Values,
    pub argv: Argv,
    /// The `configOverrides` key that would set the same thing behind the typed
    /// option's back (refused: the typed option is the one place).
    pub config_key: Option<&'static str>,
}

/// claude 2.1.332's `--permission-mode` choices.
pub const CLAUDE_PERMISSION_MODES: &[&str] = &[
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "manual",
    "dontAsk",
    "plan",
];
/// claude 2.1.332's `--effort` levels.
pub const CLAUDE_EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];
/// codex 0.171.0's `--sandbox` modes.
pub const CODEX_SANDBOXES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];
/// codex 0.171.0's reasoning efforts (the levels its model catalog offers).
pub const CODEX_EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max", "ultra"];

/// Which provider has which option, with its values and argv.
pub const TABLE: &[Support] = &[
    Support {
        provider: Provider::Claude,
        option: ProviderOption::PermissionMode,
        values: Values::OneOf(CLAUDE_PERMISSION_MODES),
        argv: Argv::Flag("--permission-mode"),
        config_key: None,
    },
    Support {
        provider: Provider::Claude,
        option: ProviderOption::Effort,
        values: Values::OneOf(CLAUDE_EFFORTS),
        argv: Argv::Flag("--effort"),
        config_key: None,
    },
    Support {
        provider: Provider::Claude,
        option: ProviderOption::AddDir,
        values: Values::Dir,
        argv: Argv::Flag("--add-dir"),
        config_key: None,
    },
    Support {
        provider: Provider::Claude,
        option: ProviderOption::MaxTurns,
        values: Values::Count,
        argv: Argv::Flag("--max-turns"),
        config_key: None,
    },
    Support {
        provider: Provider::Claude,
        option: ProviderOption::AllowTool,
        values: Values::ToolRule,
        argv: Argv::Flag("--allowed-tools"),
        config_key: None,
    },
    Support {
        provider: Provider::Claude,
        option: ProviderOption::DenyTool,
        values: Values::ToolRule,
        argv: Argv::Flag("--disallowed-tools"),
        config_key: None,
    },
    Support {
        provider: Provider::Codex,
        option: ProviderOption::Sandbox,
        values: Values::OneOf(CODEX_SANDBOXES),
        argv: Argv::Flag("--sandbox"),
        config_key: Some("sandbox_mode"),
    },
    Support {
        provider: Provider::Codex,
        option: ProviderOption::Effort,
        values: Values::OneOf(CODEX_EFFORTS),
        argv: Argv::Config("model_reasoning_effort"),
        config_key: Some("model_reasoning_effort"),
    },
    Support {
        provider: Provider::Codex,
        option: ProviderOption::AddDir,
        values: Values::Dir,
        argv: Argv::Flag("--add-dir"),
        config_key: None,
    },
    Support {
        provider: Provider::Opencode,
        option: ProviderOption::Variant,
        values: Values::Word,
        argv: Argv::Flag("--variant"),
        config_key: None,
    },
];

/// Longest option value, in bytes (a tool rule, a directory).
pub const MAX_VALUE_BYTES: usize = 4 << 10;
/// Most values of one repeatable option.
pub const MAX_VALUES: usize = 64;

/// The row for `provider` and `option`, if the provider has it.
pub fn support(provider: Provider, option: ProviderOption) -> Option<&'static Support> {
    TABLE
        .iter()
        .find(|s| s.provider == provider && s.option == option)
}

/// The providers that have `option`, comma-separated (for messages).
fn providers_with(option: ProviderOption) -> String {
    let names: Vec<&str> = TABLE
        .iter()
        .filter(|s| s.option == option)
        .map(|s| s.provider.as_str())
        .collect();
    names.join(", ")
}

/// The argv words of every option `t` sets, in [`ProviderOption::ALL`]'s order
/// (options its provider lacks are left out: validation refuses them first).
pub fn argv(t: &AgentTarget) -> Vec<String> {
    let mut out = Vec::new();
    for option in ProviderOption::ALL {
        let Some(s) = support(t.provider, option) else {
            continue;
        };
        for value in option.values(t) {
            match s.argv {
                // One argv word per value: a value cannot become a flag of its own.
                Argv::Flag(flag) => out.extend([flag.to_owned(), value]),
                Argv::Config(key) => out.extend(["-c".to_owned(), format!("{key}={value}")]),
            }
        }
    }
    out
}

/// The typed option a `configOverrides` key of `provider` would duplicate.
pub fn duplicated_by(provider: Provider, key: &str) -> Option<ProviderOption> {
    TABLE
        .iter()
        .find(|s| s.provider == provider && s.config_key == Some(key))
        .map(|s| s.option)
}

/// Checks `t`'s provider options: each one set must be its provider's (else one line
/// naming the provider and the option), each value among the accepted ones; no
/// `configOverrides` key may duplicate a typed option.
pub fn validate(t: &AgentTarget, label: &str) -> Result<(), ValidationError> {
    let fail = |message: String| Err(ValidationError(format!("{label}: {message}")));
    for option in ProviderOption::ALL {
        let values = option.values(t);
        if values.is_empty() {
            continue;
        }
        let flag = option.flag();
        let Some(s) = support(t.provider, option) else {
            let others = providers_with(option);
            let hint = if others.is_empty() {
                String::new()
            } else {
                format!(" (providers with it: {others})")
            };
            return fail(format!(
                "provider {} has no {flag} option{hint}",
                t.provider
            ));
        };
        if values.len() > MAX_VALUES {
            return fail(format!(
                "{flag} is given {} times; at most {MAX_VALUES}",
                values.len()
            ));
        }
        for value in &values {
            value_ok(s, flag, value, label)?;
        }
    }
    if t.max_turns == Some(0) {
        return fail("--max-turns must be at least 1".to_owned());
    }
    for key in t.config_overrides.keys() {
        if let Some(option) = duplicated_by(t.provider, key) {
            return fail(format!(
                "config override {key:?} duplicates {}; use that instead",
                option.flag()
            ));
        }
    }
    Ok(())
}

fn value_ok(s: &Support, flag: &str, value: &str, label: &str) -> Result<(), ValidationError> {
    let fail = |message: String| Err(ValidationError(format!("{label}: {message}")));
    limits::check(flag, value.len(), MAX_VALUE_BYTES)
        .map_err(|e| ValidationError(format!("{label}: {e}")))?;
    no_controls(flag, value, Lines::One, label)?;
    if value.trim().is_empty() {
        return fail(format!("{flag} is empty"));
    }
    match s.values {
        Values::OneOf(accepted) => {
            if !accepted.contains(&value) {
                return fail(format!(
                    "invalid {flag} {value:?} for provider {}: expected one of {}",
                    s.provider,
                    accepted.join(", ")
                ));
            }
        }
        Values::Word => {
            let word = !value.starts_with('-') && value.chars().all(crate::validate::is_name_char);
            if !word {
                return fail(format!(
                    "invalid {flag} {value:?}: expected a name (letters, digits, '.', '_', '-')"
                ));
            }
        }
        Values::Dir => {
            if !Path::new(value).is_absolute() {
                return fail(format!("{flag} {value:?} is not an absolute path"));
            }
        }
        Values::Count => {}
        Values::ToolRule => {
            if value.starts_with('-') {
                return fail(format!("invalid {flag} {value:?}: must not start with '-'"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigIsolation;
    use std::collections::BTreeMap;

    fn target(provider: Provider) -> AgentTarget {
        AgentTarget {
            provider,
            prompt: "hi".into(),
            prompt_file: None,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::Safe,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
            session: crate::SessionMode::Fresh,
            permission_mode: None,
            sandbox: None,
            effort: None,
            variant: None,
            add_dirs: Vec::new(),
            max_turns: None,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
            account_pool: Vec::new(),
        }
    }

    fn err(t: &AgentTarget) -> String {
        validate(t, "loop").unwrap_err().0
    }

    #[test]
    fn the_table_has_one_row_per_provider_and_option() {
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert!(
                    (a.provider, a.option) != (b.provider, b.option),
                    "{a:?} twice"
                );
            }
        }
        for provider in [Provider::Cursor, Provider::Codewith, Provider::Aicopilot] {
            for option in ProviderOption::ALL {
                assert!(support(provider, option).is_none(), "{provider} {option:?}");
            }
        }
    }

    #[test]
    fn claude_options_become_its_flags_in_one_order() {
        let mut t = target(Provider::Claude);
        t.permission_mode = Some("plan".into());
        t.effort = Some("high".into());
        t.add_dirs = vec!["/srv/lib".into(), "/data".into()];
        t.max_turns = Some(20);
        t.allow_tools = vec!["Bash(git:*)".into(), "Read".into()];
        t.deny_tools = vec!["WebFetch".into()];
        validate(&t, "loop").unwrap();
        assert_eq!(
            argv(&t),
            [
                "--permission-mode",
                "plan",
                "--effort",
                "high",
                "--add-dir",
                "/srv/lib",
                "--add-dir",
                "/data",
                "--max-turns",
                "20",
                "--allowed-tools",
                "Bash(git:*)",
                "--allowed-tools",
                "Read",
                "--disallowed-tools",
                "WebFetch",
            ]
        );
    }

    #[test]
    fn codex_effort_is_a_config_override_and_sandbox_its_flag() {
        let mut t = target(Provider::Codex);
        t.sandbox = Some("read-only".into());
        t.effort = Some("xhigh".into());
        t.add_dirs = vec!["/data".into()];
        validate(&t, "loop").unwrap();
        assert_eq!(
            argv(&t),
            [
                "--sandbox",
                "read-only",
                "-c",
                "model_reasoning_effort=xhigh",
                "--add-dir",
                "/data"
            ]
        );
        let mut o = target(Provider::Opencode);
        o.variant = Some("high".into());
        assert_eq!(argv(&o), ["--variant", "high"]);
        assert!(argv(&target(Provider::Claude)).is_empty());
    }

    #[test]
    fn a_provider_without_the_option_is_named_with_the_option() {
        let mut t = target(Provider::Opencode);
        t.permission_mode = Some("plan".into());
        assert_eq!(
            err(&t),
            "loop: provider opencode has no --permission-mode option (providers with it: claude)"
        );
        let mut t = target(Provider::Opencode);
        t.effort = Some("high".into());
        assert_eq!(
            err(&t),
            "loop: provider opencode has no --effort option (providers with it: claude, codex)"
        );
        let mut t = target(Provider::Claude);
        t.sandbox = Some("read-only".into());
        assert_eq!(
            err(&t),
            "loop: provider claude has no --sandbox option (providers with it: codex)"
        );
        let mut t = target(Provider::Codex);
        t.max_turns = Some(3);
        assert_eq!(
            err(&t),
            "loop: provider codex has no --max-turns option (providers with it: claude)"
        );
        let mut t = target(Provider::Cursor);
        t.deny_tools = vec!["Bash".into()];
        assert_eq!(
            err(&t),
            "loop: provider cursor has no --deny-tool option (providers with it: claude)"
        );
        let mut t = target(Provider::Codewith);
        t.add_dirs = vec!["/x".into()];
        assert!(err(&t).starts_with("loop: provider codewith has no --add-dir option"));
    }

    #[test]
    fn values_outside_the_clis_list_are_refused_with_the_list() {
        let mut t = target(Provider::Claude);
        t.permission_mode = Some("yolo".into());
        assert_eq!(
            err(&t),
            "loop: invalid --permission-mode \"yolo\" for provider claude: expected one of acceptEdits, auto, bypassPermissions, manual, dontAsk, plan"
        );
        let mut t = target(Provider::Codex);
        t.effort = Some("minimal".into());
        assert_eq!(
            err(&t),
            "loop: invalid --effort \"minimal\" for provider codex: expected one of low, medium, high, xhigh, max, ultra"
        );
        t.effort = Some("ultra".into());
        validate(&t, "loop").unwrap();
        let mut t = target(Provider::Claude);
        t.effort = Some("ultra".into());
        assert!(err(&t).contains("expected one of low, medium, high, xhigh, max"));
        let mut t = target(Provider::Codex);
        t.sandbox = Some("none".into());
        assert!(err(&t).ends_with("expected one of read-only, workspace-write, danger-full-access"));
    }

    #[test]
    fn words_dirs_counts_and_tool_rules_are_checked() {
        let mut t = target(Provider::Opencode);
        t.variant = Some("--share".into());
        assert!(err(&t).starts_with("loop: invalid --variant \"--share\""));
        t.variant = Some("high max".into());
        assert!(err(&t).contains("expected a name"));
        let mut t = target(Provider::Claude);
        t.add_dirs = vec!["../lib".into()];
        assert_eq!(
            err(&t),
            "loop: --add-dir \"../lib\" is not an absolute path"
        );
        t.add_dirs = vec!["/a\u{1b}b".into()];
        assert!(err(&t).contains("control character"));
        let mut t = target(Provider::Claude);
        t.max_turns = Some(0);
        assert_eq!(err(&t), "loop: --max-turns must be at least 1");
        let mut t = target(Provider::Claude);
        t.allow_tools = vec!["--dangerously-skip-permissions".into()];
        assert!(err(&t).contains("must not start with '-'"));
        t.allow_tools = vec![" ".into()];
        assert_eq!(err(&t), "loop: --allow-tool is empty");
        t.allow_tools = vec!["Read".into(); MAX_VALUES + 1];
        assert!(err(&t).contains("at most 64"));
    }

    #[test]
    fn config_overrides_may_not_duplicate_a_typed_option() {
        let mut t = target(Provider::Codex);
        t.config_overrides
            .insert("model_reasoning_effort".into(), "high".into());
        assert_eq!(
            err(&t),
            "loop: config override \"model_reasoning_effort\" duplicates --effort; use that instead"
        );
        let mut t = target(Provider::Codex);
        t.config_overrides
            .insert("sandbox_mode".into(), "read-only".into());
        assert!(err(&t).contains("duplicates --sandbox"));
        // codewith has no typed option for it: its override stays the way.
        let mut t = target(Provider::Codewith);
        t.config_overrides
            .insert("model_reasoning_effort".into(), "high".into());
        validate(&t, "loop").unwrap();
    }

    #[test]
    fn options_round_trip_through_json_and_are_left_out_when_unset() {
        let json = serde_json::to_value(target(Provider::Claude)).unwrap();
        for option in ProviderOption::ALL {
            assert!(json.get(option.field()).is_none(), "{}", option.field());
        }
        let mut t = target(Provider::Claude);
        t.permission_mode = Some("plan".into());
        t.add_dirs = vec!["/a".into()];
        t.max_turns = Some(2);
        t.allow_tools = vec!["Read".into()];
        t.deny_tools = vec!["WebFetch".into()];
        t.effort = Some("low".into());
        let json = serde_json::to_value(&t).unwrap();
        for option in ProviderOption::ALL {
            if option != ProviderOption::Sandbox && option != ProviderOption::Variant {
                assert!(json.get(option.field()).is_some(), "{}", option.field());
            }
        }
        let back: AgentTarget = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        for option in ProviderOption::ALL {
            option.clear(&mut t);
        }
        assert_eq!(t, target(Provider::Claude));
    }
}
