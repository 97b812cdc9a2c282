//! Which permission an input needs beyond `--allow-mutations`: defining or changing
//! *what runs* needs `--allow-code`, because it is code execution as the server's
//! user whatever form it takes — a shell command line, an argv whose program is a
//! shell (or any other program), an agent's prompt (a coding agent acts on it; codex
//! runs commands unasked), a target's env (`PATH` picks the binary, `LD_PRELOAD` and
//! `BASH_ENV` inject code), its cwd (where relative programs and an agent's settings
//! are found) or its account (or account pool), a notification command, a stop condition's `untilCmd`
//! (run after each successful run). A workflow loop names a stored
//! workflow, whose steps its owner defined: creating one or pointing it at another
//! stored workflow schedules what is already defined, like `run-now` on a timer —
//! except for the values of params that pick a step's program or set an env value
//! (`loops_core::workflow_params::defining_code`), which need `--allow-code` wherever
//! they are given (`Server::params_gate`).
//! A notification URL gets each notified run with its output: `--allow-secrets`.

use loops_core::{LoopOps, Notify, Target};

/// Whether `after` runs something other than `before`: any field of a command or an
/// agent target but its limits, `timeout` and `idleTimeout` (program, arguments, shell,
/// prompt, provider, model, options, env, cwd, account, an agent's provider options —
/// `permissionMode` `bypassPermissions`, `sandbox` `danger-full-access`, `allowTools`
/// widen what it may do unasked — and its `session`: a resumed conversation carries
/// its earlier turns into what the agent acts on). Two workflow targets never do (both name stored
/// workflows); a target of another kind always does.
pub fn changes_what_runs(before: &Target, after: &Target) -> bool {
    match (before, after) {
        (Target::Workflow(_), Target::Workflow(_)) => false,
        (Target::Command(a), Target::Command(b)) => {
            let (mut a, mut b) = (a.clone(), b.clone());
            (a.timeout, b.timeout) = (None, None);
            (a.idle_timeout, b.idle_timeout) = (None, None);
            a != b
        }
        (Target::Agent(a), Target::Agent(b)) => {
            let (mut a, mut b) = (a.clone(), b.clone());
            (a.timeout, b.timeout) = (None, None);
            (a.idle_timeout, b.idle_timeout) = (None, None);
            a != b
        }
        _ => true,
    }
}

/// Whether `after` sets a notification command `before` did not have (a new or
/// changed one; removing one runs nothing new).
pub fn sets_notify_cmd(before: Option<&Notify>, after: Option<&Notify>) -> bool {
    let cmd = |n: Option<&Notify>| n.and_then(|n| n.cmd.clone());
    cmd(after).is_some() && cmd(after) != cmd(before)
}

/// Whether `after` sets an `--until-cmd` `before` did not have (a new or changed one;
/// clearing it, or `--until-output` and `--max-runs`, run nothing).
pub fn sets_until_cmd(before: &LoopOps, after: &LoopOps) -> bool {
    after.until_cmd.is_some() && after.until_cmd != before.until_cmd
}

/// Whether `after` sets a notification URL `before` did not have.
pub fn sets_notify_url(before: Option<&Notify>, after: Option<&Notify>) -> bool {
    let url = |n: Option<&Notify>| n.and_then(|n| n.url.clone());
    url(after).is_some() && url(after) != url(before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loops_core::{CommandTarget, Duration, NotifyOn, WorkflowTarget};
    use std::collections::BTreeMap;

    fn cmd(command: &str) -> Target {
        Target::Command(CommandTarget {
            command: command.into(),
            args: vec![],
            cwd: None,
            shell: true,
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
        })
    }

    #[test]
    fn only_the_limits_and_the_stored_workflow_may_change() {
        let base = cmd("echo hi");
        let mut timed = base.clone();
        if let Target::Command(c) = &mut timed {
            c.timeout = Duration::from_millis(5_000);
            c.idle_timeout = Duration::from_millis(1_000);
        }
        assert!(!changes_what_runs(&base, &timed));
        assert!(changes_what_runs(&base, &cmd("echo bye")));
        for change in [
            |c: &mut CommandTarget| c.shell = false,
            |c: &mut CommandTarget| c.args.push("x".into()),
            |c: &mut CommandTarget| c.cwd = Some("/tmp".into()),
            |c: &mut CommandTarget| {
                c.env.insert("LD_PRELOAD".into(), "/x.so".into());
            },
        ] {
            let mut changed = base.clone();
            if let Target::Command(c) = &mut changed {
                change(c);
            }
            assert!(changes_what_runs(&base, &changed), "{changed:?}");
        }
        let wf = |name: &str| {
            Target::Workflow(WorkflowTarget {
                workflow: name.into(),
                timeout: None,
                params: Default::default(),
            })
        };
        assert!(!changes_what_runs(&wf("a"), &wf("b")));
        assert!(changes_what_runs(&wf("a"), &base));
    }

    #[test]
    fn an_agents_session_mode_changes_what_runs() {
        let fresh = loops_core::AgentTarget {
            account_pool: Vec::new(),
            provider: loops_core::Provider::Claude,
            prompt: "review".into(),
            prompt_file: None,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: loops_core::ConfigIsolation::DEFAULT,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
            session: loops_core::SessionMode::Fresh,
            permission_mode: None,
            sandbox: None,
            effort: None,
            variant: None,
            add_dirs: Vec::new(),
            max_turns: None,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
        };
        let continued = loops_core::AgentTarget {
            session: loops_core::SessionMode::Continue,
            ..fresh.clone()
        };
        for widened in [
            loops_core::AgentTarget {
                permission_mode: Some("bypassPermissions".into()),
                ..fresh.clone()
            },
            loops_core::AgentTarget {
                add_dirs: vec!["/".into()],
                ..fresh.clone()
            },
            loops_core::AgentTarget {
                allow_tools: vec!["Bash".into()],
                ..fresh.clone()
            },
            loops_core::AgentTarget {
                max_turns: Some(1),
                ..fresh.clone()
            },
        ] {
            let (a, b) = (Target::Agent(fresh.clone()), Target::Agent(widened));
            assert!(changes_what_runs(&a, &b), "{b:?}");
        }
        let (a, b) = (Target::Agent(fresh), Target::Agent(continued));
        assert!(changes_what_runs(&a, &b));
        assert!(changes_what_runs(&b, &a));
        assert!(!changes_what_runs(&b, &b.clone()));
        // An account pool selects credentials, as `account` does.
        let Target::Agent(fresh) = a.clone() else {
            unreachable!()
        };
        let pooled = Target::Agent(loops_core::AgentTarget {
            account_pool: vec!["work".into(), "home".into()],
            ..fresh
        });
        assert!(changes_what_runs(&a, &pooled));
        assert!(changes_what_runs(&pooled, &a));
    }

    #[test]
    fn new_notification_commands_and_urls() {
        let n = |cmd: Option<&str>, url: Option<&str>| Notify {
            cmd: cmd.map(Into::into),
            url: url.map(Into::into),
            on: NotifyOn::Failure,
        };
        let a = n(Some("echo a"), None);
        assert!(sets_notify_cmd(None, Some(&a)));
        assert!(!sets_notify_cmd(Some(&a), Some(&a)));
        assert!(!sets_notify_cmd(Some(&a), None));
        assert!(sets_notify_cmd(Some(&a), Some(&n(Some("echo b"), None))));
        let u = n(None, Some("https://x.example/"));
        assert!(sets_notify_url(Some(&a), Some(&u)));
        assert!(!sets_notify_url(Some(&u), Some(&u)));
        assert!(!sets_notify_cmd(Some(&a), Some(&u)));
    }

    #[test]
    fn a_new_until_cmd_is_code_and_the_other_stop_conditions_are_not() {
        let none = LoopOps::default();
        let until = |cmd: &str| LoopOps {
            until_cmd: Some(cmd.into()),
            ..LoopOps::default()
        };
        assert!(sets_until_cmd(&none, &until("make test")));
        assert!(sets_until_cmd(&until("make test"), &until("make check")));
        assert!(!sets_until_cmd(&until("make test"), &until("make test")));
        assert!(!sets_until_cmd(&until("make test"), &none));
        let limits = LoopOps {
            until_output: Some("PASS".into()),
            max_runs: Some(3),
            ..LoopOps::default()
        };
        assert!(!sets_until_cmd(&none, &limits));
    }
}
