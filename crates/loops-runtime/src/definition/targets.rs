//! The three targets' own flags laid over a base: a command (its line or argv), an agent
//! (provider, prompt, options), a workflow (its name and params); and the flags they share.

use super::*;

/// [`process_flags`] laid over target `$t`'s own fields (a command and an agent name
/// them alike).
macro_rules! own_process_flags {
    ($c:expr, $t:expr) => {
        process_flags(
            $c,
            &mut $t.cwd,
            &mut $t.timeout,
            &mut $t.idle_timeout,
            &mut $t.env,
        )
    };
}

/// What the command flags of one command line ask for; `None` keeps that part (on
/// `create`, `None` for `shell` is [`CommandTarget::default_shell`]).
pub struct CommandFlags {
    pub cmd: Option<String>,
    /// `Some(false)` for `--no-shell`.
    pub shell: Option<bool>,
    pub args: Option<Vec<String>>,
}

/// A command target: the command flags and the shared target flags (`--cwd`,
/// `--timeout`, `--env`, `--account`) laid over `base` (`None` on `create`, where
/// `--cmd` is given).
pub fn command_target(
    base: Option<CommandTarget>,
    f: CommandFlags,
    c: &DefinitionFlags,
) -> Result<CommandTarget, String> {
    let created = base.is_none();
    let mut t = base.unwrap_or(CommandTarget {
        command: String::new(),
        args: Vec::new(),
        cwd: None,
        shell: true,
        env: BTreeMap::new(),
        timeout: None,
        idle_timeout: None,
        account: None,
    });
    if let Some(cmd) = f.cmd {
        t.command = cmd;
    }
    if let Some(args) = f.args {
        t.args = args;
    }
    match f.shell {
        Some(shell) => t.shell = shell,
        None if created => t.shell = CommandTarget::default_shell(&t.args),
        None => {}
    }
    if t.shell && !t.args.is_empty() {
        return Err(
            "arguments after `--` need --no-shell (with a shell, put them in --cmd)".to_owned(),
        );
    }
    own_process_flags!(c, t)?;
    if let Some(account) = account(c) {
        t.account = Some(account);
    }
    if !t.shell && t.command.trim().contains(char::is_whitespace) {
        return Err(format!(
            "--cmd {:?} contains spaces but --no-shell executes it directly; pass arguments after `--` (e.g. --cmd git -- status --short)",
            t.command
        ));
    }
    Ok(t)
}

/// What the agent flags of one command line ask for; `None` keeps that part.
pub struct AgentFlags<'a> {
    pub provider: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub prompt_file: Option<&'a Path>,
    pub options: &'a AgentOptions,
}

/// An agent target: the agent flags and the shared target flags laid over `base`
/// (`None` on `create`, where `--provider` and a prompt are given). A prompt given as
/// text drops the stored prompt file's path.
pub fn agent_target(
    base: Option<AgentTarget>,
    f: AgentFlags<'_>,
    c: &DefinitionFlags,
) -> Result<AgentTarget, String> {
    let provider = f
        .provider
        .map(|p| parse_enum::<Provider>("--provider", p))
        .transpose()?;
    let prompt = match (f.prompt, f.prompt_file) {
        (Some(p), _) => Some((p.to_owned(), None)),
        (None, Some(path)) => Some(prompt_file(path)?),
        (None, None) => None,
    };
    if let Some((text, _)) = &prompt {
        if text.trim().is_empty() {
            return Err("prompt is empty".to_owned());
        }
    }
    let mut t = match (base, provider, prompt.clone()) {
        (Some(t), _, _) => t,
        (None, Some(provider), Some((prompt, prompt_file))) => AgentTarget {
            account_pool: Vec::new(),
            provider,
            prompt,
            prompt_file,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::DEFAULT,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
            session: loops_core::SessionMode::DEFAULT,
            permission_mode: None,
            sandbox: None,
            effort: None,
            variant: None,
            add_dirs: Vec::new(),
            max_turns: None,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
        },
        (None, None, _) => return Err("--provider is required".to_owned()),
        (None, _, None) => return Err("--prompt or --prompt-file is required".to_owned()),
    };
    if let Some(provider) = provider {
        t.provider = provider;
    }
    if let Some((text, file)) = prompt {
        t.prompt = text;
        t.prompt_file = file;
    }
    let o = f.options;
    if let Some(m) = &o.model {
        t.model = Some(m.clone());
    }
    if let Some(a) = &o.agent {
        t.agent = Some(a.clone());
    }
    if let Some(p) = &o.auth_profile {
        t.auth_profile = Some(p.clone());
    }
    if let Some(v) = &o.config_isolation {
        t.config_isolation = parse_enum("--config-isolation", v)?;
    }
    if let Some(v) = &o.session {
        t.session = parse_enum("--session", v)?;
    }
    t.config_overrides
        .extend(key_values("--config-override", &o.config_overrides)?);
    o.apply_provider_options(&mut t)?;
    own_process_flags!(c, t)?;
    // One of `--account` and `--account-pool`: either replaces the other on `edit`.
    if !o.account_pool.is_empty() {
        if c.account.is_some() {
            return Err("--account and --account-pool are mutually exclusive".to_owned());
        }
        t.account_pool = o.account_pool.clone();
        t.account = None;
    }
    if let Some(account) = account(c) {
        t.account = Some(account);
        t.account_pool.clear();
    }
    Ok(t)
}

/// `--prompt-file`: read (at most 1 MiB) and kept with its absolute path.
pub(super) fn prompt_file(path: &Path) -> Result<(String, Option<String>), String> {
    let typed = path
        .to_str()
        .ok_or_else(|| format!("--prompt-file {} is not valid UTF-8", path.display()))?;
    let abs = absolute_path(typed, None, "--prompt-file")?;
    let text = read_text(Path::new(&abs), MAX_PROMPT_BYTES, "--prompt-file")?;
    if text.trim().is_empty() {
        return Err(format!("--prompt-file {abs} is empty"));
    }
    Ok((text, Some(abs)))
}

/// A workflow target's own flags: `--workflow`, `--param NAME=VALUE` (set, each name
/// once) and, on `edit`, `--unset-param NAME`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkflowFlags<'a> {
    pub workflow: Option<&'a str>,
    pub params: &'a [String],
    pub unset_params: &'a [String],
}

/// A workflow target: `--workflow`, `--param`/`--unset-param` and `--timeout` laid over
/// `base` (`None` on `create`, where `--workflow` is given). The params are checked
/// against the workflow's spec by the client, which has it.
pub fn workflow_target(
    base: Option<WorkflowTarget>,
    w: WorkflowFlags<'_>,
    c: &DefinitionFlags,
) -> Result<WorkflowTarget, String> {
    let mut t = match (base, w.workflow) {
        (Some(t), _) => t,
        (None, Some(name)) => WorkflowTarget {
            workflow: name.to_owned(),
            timeout: None,
            params: BTreeMap::new(),
        },
        (None, None) => return Err("--workflow is required".to_owned()),
    };
    if let Some(name) = w.workflow {
        t.workflow = name.to_owned();
    }
    for name in w.unset_params {
        t.params.remove(name);
    }
    t.params
        .extend(loops_core::workflow_params::parse_assignments(w.params)?);
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    // A workflow loop has no process of its own: these are its steps' (in the spec),
    // and taking them here would store nothing and say nothing.
    let steps_own = [
        ("--idle-timeout", c.idle_timeout.is_some(), "idleTimeoutMs"),
        ("--cwd", c.cwd.is_some(), "cwd"),
        ("--env", !c.env.is_empty(), "env"),
        ("--account", c.account.is_some(), "account"),
        ("--account-tool", c.account_tool.is_some(), "account"),
    ];
    if let Some((flag, _, field)) = steps_own.into_iter().find(|(_, given, _)| *given) {
        return Err(format!(
            "{flag} is for command and agent loops (a workflow's steps take {field} in the spec)"
        ));
    }
    Ok(t)
}

/// The flags for a target's own process (command and agent targets): `--cwd`,
/// `--timeout` and `--idle-timeout` replace, `--env` adds.
fn process_flags(
    c: &DefinitionFlags,
    target_cwd: &mut Option<String>,
    timeout: &mut Option<Duration>,
    idle_timeout: &mut Option<Duration>,
    env: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(dir) = cwd(c)? {
        *target_cwd = Some(dir);
    }
    if c.timeout.is_some() {
        *timeout = c.timeout;
    }
    if c.idle_timeout.is_some() {
        *idle_timeout = c.idle_timeout;
    }
    env.extend(env_map(&c.env)?);
    Ok(())
}

/// `--cwd`, made absolute against this process's directory (`~/` is `$HOME`), so the
/// run does not depend on where its runner was started.
pub(super) fn cwd(c: &DefinitionFlags) -> Result<Option<String>, String> {
    match c.cwd.as_deref() {
        // Left for validation to name ("cwd is empty").
        Some(dir) if dir.trim().is_empty() => Ok(Some(dir.to_owned())),
        Some(dir) => absolute_path(dir, None, "--cwd").map(Some),
        None => Ok(None),
    }
}

pub(super) fn account(c: &DefinitionFlags) -> Option<Account> {
    c.account.as_ref().map(|profile| Account {
        profile: profile.clone(),
        tool: c.account_tool.clone(),
    })
}

pub(super) fn env_map(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    key_values("--env", pairs)
}

/// Repeated `KEY=VALUE` flags; only the first `=` splits (values may contain `=`, as
/// TOML does in `model_providers.mock={name="Mock"}`). A key given twice is refused
/// rather than silently keeping the last value.
pub(super) fn key_values(flag: &str, pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("invalid {flag} {pair:?}: expected KEY=VALUE"))?;
        if map.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(format!("{flag} {k} is given twice; give each key once"));
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workflow loop has no process of its own: `--cwd`, `--env`, `--account`,
    /// `--account-tool` and `--idle-timeout` belong to its steps, so each is refused by
    /// name, on `create` and `edit` alike, instead of being taken and dropped.
    #[test]
    fn a_workflow_target_refuses_its_steps_own_flags() {
        let flags = WorkflowFlags {
            workflow: Some("nightly"),
            ..WorkflowFlags::default()
        };
        let cases: [(&str, DefinitionFlags); 5] = [
            (
                "--cwd",
                DefinitionFlags {
                    cwd: Some("/tmp".into()),
                    ..DefinitionFlags::default()
                },
            ),
            (
                "--env",
                DefinitionFlags {
                    env: vec!["A=1".into()],
                    ..DefinitionFlags::default()
                },
            ),
            (
                "--account",
                DefinitionFlags {
                    account: Some("work".into()),
                    ..DefinitionFlags::default()
                },
            ),
            (
                "--account-tool",
                DefinitionFlags {
                    account_tool: Some("claude".into()),
                    ..DefinitionFlags::default()
                },
            ),
            (
                "--idle-timeout",
                DefinitionFlags {
                    idle_timeout: loops_core::Duration::from_millis(60_000),
                    ..DefinitionFlags::default()
                },
            ),
        ];
        for (flag, c) in cases {
            for base in [
                None,
                Some(WorkflowTarget {
                    workflow: "nightly".into(),
                    timeout: None,
                    params: BTreeMap::new(),
                }),
            ] {
                let edit = base.is_some();
                let Err(e) = workflow_target(base, flags, &c) else {
                    panic!("{flag} was taken (edit: {edit})");
                };
                assert!(
                    e.starts_with(&format!("{flag} is for command and agent loops")),
                    "{e}"
                );
            }
        }
        let plain = workflow_target(None, flags, &DefinitionFlags::default());
        assert_eq!(plain.map(|t| t.workflow), Ok("nightly".to_owned()));
    }
}
