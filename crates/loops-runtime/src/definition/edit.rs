//! `edit`: the flags that change a stored loop laid over it — a target's type is fixed,
//! `--clear` empties a setting, flags of another target type are refused naming the loop's.

use super::*;

/// What `edit --clear` can clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearField {
    Description,
    Cwd,
    Timeout,
    Env,
    Account,
    Args,
    Model,
    Agent,
    AuthProfile,
    ConfigOverrides,
    ExpiresAt,
    Jitter,
    Labels,
    On,
    Notify,
    NotifyCmd,
    NotifyUrl,
    MaxFailures,
    IdleTimeout,
    UntilCmd,
    UntilOutput,
    MaxRuns,
    Session,
    BudgetTokens,
    BudgetUsd,
    AccountPool,
    /// A provider option (its [`ProviderOption::clear_name`]).
    Provider(ProviderOption),
}

impl ClearField {
    /// Every field, in the order `--clear` lists them.
    pub const ALL: [ClearField; 34] = [
        ClearField::Description,
        ClearField::Cwd,
        ClearField::Timeout,
        ClearField::Env,
        ClearField::Account,
        ClearField::Args,
        ClearField::Model,
        ClearField::Agent,
        ClearField::AuthProfile,
        ClearField::ConfigOverrides,
        ClearField::ExpiresAt,
        ClearField::Jitter,
        ClearField::Labels,
        ClearField::On,
        ClearField::Notify,
        ClearField::NotifyCmd,
        ClearField::NotifyUrl,
        ClearField::MaxFailures,
        ClearField::IdleTimeout,
        ClearField::UntilCmd,
        ClearField::UntilOutput,
        ClearField::MaxRuns,
        ClearField::Session,
        ClearField::BudgetTokens,
        ClearField::BudgetUsd,
        ClearField::AccountPool,
        ClearField::Provider(ProviderOption::PermissionMode),
        ClearField::Provider(ProviderOption::Sandbox),
        ClearField::Provider(ProviderOption::Effort),
        ClearField::Provider(ProviderOption::Variant),
        ClearField::Provider(ProviderOption::AddDir),
        ClearField::Provider(ProviderOption::MaxTurns),
        ClearField::Provider(ProviderOption::AllowTool),
        ClearField::Provider(ProviderOption::DenyTool),
    ];

    /// The flag value (`auth-profile`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClearField::Description => "description",
            ClearField::Cwd => "cwd",
            ClearField::Timeout => "timeout",
            ClearField::Env => "env",
            ClearField::Account => "account",
            ClearField::Args => "args",
            ClearField::Model => "model",
            ClearField::Agent => "agent",
            ClearField::AuthProfile => "auth-profile",
            ClearField::ConfigOverrides => "config-overrides",
            ClearField::ExpiresAt => "expires-at",
            ClearField::Jitter => "jitter",
            ClearField::Labels => "labels",
            ClearField::On => "on",
            ClearField::Notify => "notify",
            ClearField::NotifyCmd => "notify-cmd",
            ClearField::NotifyUrl => "notify-url",
            ClearField::MaxFailures => "max-failures",
            ClearField::UntilCmd => "until-cmd",
            ClearField::UntilOutput => "until-output",
            ClearField::MaxRuns => "max-runs",
            ClearField::IdleTimeout => "idle-timeout",
            ClearField::Session => "session",
            ClearField::BudgetTokens => "budget-tokens",
            ClearField::BudgetUsd => "budget-usd",
            ClearField::AccountPool => "account-pool",
            ClearField::Provider(option) => option.clear_name(),
        }
    }
}

impl FromStr for ClearField {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let choices = ClearField::ALL.map(|f| (f.as_str(), f));
        loops_core::validate::one_of("--clear", text, &choices)
    }
}

/// The flags of one `edit`: the definition's, the target's (of the loop's type
/// only), and what to remove or clear.
#[derive(Debug, Clone, Default)]
pub struct EditFlags {
    pub def: DefinitionFlags,
    /// Labels to remove (one the loop does not have is ignored).
    pub unlabels: Vec<String>,
    /// Environment variables to remove.
    pub unset_env: Vec<String>,
    pub clear: Vec<ClearField>,
    /// (command loops) The command line.
    pub cmd: Option<String>,
    /// (command loops) Execute the command directly.
    pub no_shell: bool,
    /// (command loops) Run the command by /bin/sh again.
    pub shell: bool,
    /// (command loops) Arguments for a `--no-shell` command (replacing the stored
    /// ones); empty keeps them.
    pub args: Vec<String>,
    /// (agent loops)
    pub provider: Option<String>,
    pub prompt: Option<String>,
    pub prompt_file: Option<std::path::PathBuf>,
    pub agent: AgentOptions,
    /// (workflow loops) The stored workflow to run.
    pub workflow: Option<String>,
    /// (workflow loops) `NAME=VALUE` values for the workflow's params (set).
    pub params: Vec<String>,
    /// (workflow loops) Params whose value is removed (the spec's default applies).
    pub unset_params: Vec<String>,
}

/// The definition `e` makes of the loop `before`: cleared fields, removed labels and
/// env variables, then the given flags laid over the rest. Flags of another target
/// type than the loop's are refused, naming the loop's (a target's type is fixed).
pub fn edited(before: &Loop, e: &EditFlags, now: Instant) -> Result<LoopDefinition, String> {
    check_kind(before, e)?;
    let mut def = LoopDefinition::from(before);
    for field in &e.clear {
        clear(&mut def, *field)?;
    }
    for label in &e.unlabels {
        loops_core::validate::label(label).map_err(|e| e.to_string())?;
        def.labels.retain(|l| l != label);
    }
    for key in &e.unset_env {
        match &mut def.target {
            Target::Command(c) => c.env.remove(key),
            Target::Agent(a) => a.env.remove(key),
            Target::Workflow(_) => {
                return Err(kind_error(before, "--unset-env", "command or agent"))
            }
        };
    }
    if let Some(s) = schedule(&e.def, Some(&def.schedule), now)? {
        def.schedule = s;
    }
    def.target = edited_target(def.target, e)?;
    apply(&mut def, &e.def, now)?;
    Ok(def)
}

/// The target flags laid over the loop's target (of the same type: see
/// [`check_kind`]).
pub(super) fn edited_target(target: Target, e: &EditFlags) -> Result<Target, String> {
    Ok(match target {
        Target::Command(t) => {
            let flags = CommandFlags {
                cmd: e.cmd.clone(),
                shell: match (e.shell, e.no_shell) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                args: (!e.args.is_empty()).then(|| e.args.clone()),
            };
            Target::Command(command_target(Some(t), flags, &e.def)?)
        }
        Target::Agent(t) => {
            let flags = AgentFlags {
                provider: e.provider.as_deref(),
                prompt: e.prompt.as_deref(),
                prompt_file: e.prompt_file.as_deref(),
                options: &e.agent,
            };
            Target::Agent(agent_target(Some(t), flags, &e.def)?)
        }
        Target::Workflow(t) => {
            let flags = WorkflowFlags {
                workflow: e.workflow.as_deref(),
                params: &e.params,
                unset_params: &e.unset_params,
            };
            Target::Workflow(workflow_target(Some(t), flags, &e.def)?)
        }
    })
}

/// A target's type is fixed: flags of another type are refused, naming the loop's.
pub(super) fn check_kind(lp: &Loop, e: &EditFlags) -> Result<(), String> {
    let o = &e.agent;
    let command = [
        ("--cmd", e.cmd.is_some()),
        ("--no-shell", e.no_shell),
        ("--shell", e.shell),
        ("arguments after `--`", !e.args.is_empty()),
    ];
    let agent = [
        ("--provider", e.provider.is_some()),
        ("--prompt", e.prompt.is_some()),
        ("--prompt-file", e.prompt_file.is_some()),
        ("--model", o.model.is_some()),
        ("--agent", o.agent.is_some()),
        ("--auth-profile", o.auth_profile.is_some()),
        ("--config-isolation", o.config_isolation.is_some()),
        ("--config-override", !o.config_overrides.is_empty()),
        ("--session", o.session.is_some()),
        ("--account-pool", !o.account_pool.is_empty()),
        (
            o.provider_option_given().unwrap_or("a provider option"),
            o.provider_option_given().is_some(),
        ),
    ];
    let workflow = [
        ("--workflow", e.workflow.is_some()),
        ("--param", !e.params.is_empty()),
        ("--unset-param", !e.unset_params.is_empty()),
    ];
    let (others, kinds): (Vec<&[(&str, bool)]>, _) = match &lp.target {
        Target::Command(_) => (vec![&agent, &workflow], ["agent", "workflow"]),
        Target::Agent(_) => (vec![&command, &workflow], ["command", "workflow"]),
        Target::Workflow(_) => (vec![&command, &agent], ["command", "agent"]),
    };
    for (flags, kind) in others.into_iter().zip(kinds) {
        if let Some((flag, _)) = flags.iter().find(|(_, given)| *given) {
            return Err(kind_error(lp, flag, kind));
        }
    }
    Ok(())
}

pub(super) fn kind_error(lp: &Loop, flag: &str, kind: &str) -> String {
    format!(
        "{flag} is for {kind} loops; loop {:?} runs a {} target (a target's type cannot be changed: create a new loop)",
        lp.name,
        lp.target.kind()
    )
}

/// `--clear FIELD`.
pub(super) fn clear(def: &mut LoopDefinition, field: ClearField) -> Result<(), String> {
    let kind = def.target.kind();
    let wrong = || {
        format!(
            "--clear {} is not a setting of a {kind} loop",
            field.as_str()
        )
    };
    match field {
        ClearField::Description => def.description = None,
        ClearField::ExpiresAt => def.policy.expires_at = None,
        ClearField::Jitter => def.policy.jitter_ms = 0,
        ClearField::Labels => def.labels.clear(),
        ClearField::On => def.policy.runs_on.clear(),
        ClearField::MaxFailures => def.policy.ops.max_failures = None,
        ClearField::UntilCmd => def.policy.ops.until_cmd = None,
        ClearField::UntilOutput => def.policy.ops.until_output = None,
        ClearField::MaxRuns => def.policy.ops.max_runs = None,
        ClearField::BudgetTokens => def.policy.ops.budget_tokens = None,
        ClearField::BudgetUsd => def.policy.ops.budget_usd = None,
        ClearField::Notify => def.notify = None,
        ClearField::NotifyCmd | ClearField::NotifyUrl => {
            if let Some(n) = def.notify.as_mut() {
                if field == ClearField::NotifyCmd {
                    n.cmd = None;
                } else {
                    n.url = None;
                }
                if n.cmd.is_none() && n.url.is_none() {
                    def.notify = None;
                }
            }
        }
        ClearField::IdleTimeout => match &mut def.target {
            Target::Command(c) => c.idle_timeout = None,
            Target::Agent(a) => a.idle_timeout = None,
            Target::Workflow(_) => return Err(wrong()),
        },
        ClearField::Timeout => match &mut def.target {
            Target::Command(c) => c.timeout = None,
            Target::Agent(a) => a.timeout = None,
            Target::Workflow(w) => w.timeout = None,
        },
        ClearField::Cwd | ClearField::Env | ClearField::Account => {
            let (cwd, env, account) = match &mut def.target {
                Target::Command(c) => (&mut c.cwd, &mut c.env, &mut c.account),
                Target::Agent(a) => (&mut a.cwd, &mut a.env, &mut a.account),
                Target::Workflow(_) => return Err(wrong()),
            };
            match field {
                ClearField::Cwd => *cwd = None,
                ClearField::Env => env.clear(),
                _ => *account = None,
            }
        }
        ClearField::Args => match &mut def.target {
            Target::Command(c) => c.args.clear(),
            _ => return Err(wrong()),
        },
        ClearField::Model
        | ClearField::Agent
        | ClearField::AuthProfile
        | ClearField::ConfigOverrides
        | ClearField::Session
        | ClearField::AccountPool
        | ClearField::Provider(_) => {
            let Target::Agent(a) = &mut def.target else {
                return Err(wrong());
            };
            match field {
                ClearField::Model => a.model = None,
                ClearField::Agent => a.agent = None,
                ClearField::AuthProfile => a.auth_profile = None,
                ClearField::Session => a.session = loops_core::SessionMode::DEFAULT,
                ClearField::AccountPool => a.account_pool.clear(),
                ClearField::Provider(option) => option.clear(a),
                _ => a.config_overrides.clear(),
            }
        }
    }
    Ok(())
}
