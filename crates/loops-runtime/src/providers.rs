//! Agent provider adapters: how each agent CLI is invoked. The prompt always goes to
//! stdin, never on argv (argv is world-readable through `/proc`).

use loops_core::{AgentTarget, ConfigIsolation, Provider, RunOutcome};

/// Reads the provider's structured output on a finished agent run: fills `summary` and
/// `usage`, and turns a reported error (exit 0 with `is_error`) into a failure.
pub fn interpret(target: &AgentTarget, outcome: &mut RunOutcome) {
    let _ = (target, outcome);
}

/// The argv (after the executable) for `target`.
pub fn agent_args(target: &AgentTarget) -> Vec<String> {
    let safe = target.config_isolation == ConfigIsolation::Safe;
    let mut args: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    match target.provider {
        Provider::Claude => {
            if safe {
                push(&[
                    "--safe-mode",
                    "--setting-sources",
                    "local",
                    "--no-session-persistence",
                ]);
            }
            push(&["-p", "--output-format", "json"]);
        }
        Provider::Codex | Provider::Codewith => {
            // `--ask-for-approval` (and codewith's `--auth-profile`) must precede `exec`.
            push(&["--ask-for-approval", "never"]);
            if let (Provider::Codewith, Some(profile)) = (target.provider, &target.auth_profile) {
                push(&["--auth-profile", profile]);
            }
            push(&[
                "exec",
                "--json",
                "--ephemeral",
                "--sandbox",
                "workspace-write",
                "--skip-git-repo-check",
            ]);
            if safe {
                push(&["--ignore-rules"]);
            }
            if let Some(dir) = &target.cwd {
                push(&["--cd", dir]);
            }
        }
        Provider::Opencode | Provider::Aicopilot => {
            push(&["run", "--format", "json"]);
            if safe {
                push(&["--pure"]);
            }
            if let Some(dir) = &target.cwd {
                push(&["--dir", dir]);
            }
        }
        Provider::Cursor => push(&["-p"]),
    }
    if let Some(model) = &target.model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    if let Some(agent) = &target.agent {
        if target.provider != Provider::Codex && target.provider != Provider::Codewith {
            args.extend(["--agent".to_owned(), agent.clone()]);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(provider: Provider) -> AgentTarget {
        AgentTarget {
            provider,
            prompt: "p".into(),
            prompt_file: None,
            cwd: None,
            model: Some("m".into()),
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::Safe,
            env: Default::default(),
            timeout_ms: None,
            account: None,
        }
    }

    #[test]
    fn argv_per_provider() {
        assert_eq!(
            agent_args(&target(Provider::Claude)).join(" "),
            "--safe-mode --setting-sources local --no-session-persistence -p --output-format json --model m"
        );
        let mut codewith = target(Provider::Codewith);
        codewith.auth_profile = Some("work".into());
        codewith.cwd = Some("/src".into());
        assert_eq!(
            agent_args(&codewith).join(" "),
            "--ask-for-approval never --auth-profile work exec --json --ephemeral --sandbox workspace-write --skip-git-repo-check --ignore-rules --cd /src --model m"
        );
        let mut opencode = target(Provider::Opencode);
        opencode.config_isolation = ConfigIsolation::None;
        opencode.agent = Some("build".into());
        assert_eq!(
            agent_args(&opencode).join(" "),
            "run --format json --model m --agent build"
        );
        assert_eq!(
            agent_args(&target(Provider::Cursor)).join(" "),
            "-p --model m"
        );
    }
}
