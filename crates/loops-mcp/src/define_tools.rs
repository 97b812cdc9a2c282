//! Tools that define loops: `loops_create_command`, `loops_create_agent`,
//! `loops_create_workflow` and `loops_edit`. Their parameters are the CLI's flags,
//! turned into a definition by the runtime's `definition` functions that the CLI's
//! `create` and `edit` use, so they accept and refuse the same input with the same
//! messages; the client validates and stores it. What each needs beyond
//! `--allow-mutations` is [`crate::gate`]'s. (The tools are declared in
//! [`crate::tools`]; here is what answers them.)

use crate::gate;
use crate::params::{
    AgentFields, CreateAgentParams, CreateCommandParams, CreateWorkflowParams, DefinitionFields,
    EditParams,
};
use crate::server::{blocking, json, LoopsMcp, Outcome};
use loops_core::redact::redact_loop;
use loops_core::{Loop, Target};
use loops_runtime::client::LoopDefinition;
use loops_runtime::definition::{
    self, AgentFlags, ClearField, CommandFlags, DefinitionFlags, EditFlags,
};
use std::path::PathBuf;

impl LoopsMcp {
    pub(crate) async fn create_command(&self, p: CreateCommandParams) -> Outcome {
        self.mutation("loops_create_command")?;
        self.code("loops_create_command")?;
        let flags = p.flags()?;
        // Without noShell, the CLI's default: a shell for one string, none for a
        // program and its args.
        let command = CommandFlags {
            cmd: Some(p.cmd),
            shell: p.no_shell.then_some(false),
            args: Some(p.args),
        };
        let target = definition::command_target(None, command, &flags)?;
        self.create(p.name, flags, Target::Command(target)).await
    }

    pub(crate) async fn create_agent(&self, p: CreateAgentParams) -> Outcome {
        self.mutation("loops_create_agent")?;
        self.code("loops_create_agent")?;
        one_prompt(p.prompt.as_ref(), p.prompt_file.as_ref())?;
        let flags = p.flags()?;
        let options = p.agent_options()?;
        let prompt_file = p.prompt_file.map(PathBuf::from);
        let agent = AgentFlags {
            provider: Some(&p.provider),
            prompt: p.prompt.as_deref(),
            prompt_file: prompt_file.as_deref(),
            options: &options,
        };
        let target = definition::agent_target(None, agent, &flags)?;
        self.create(p.name, flags, Target::Agent(target)).await
    }

    pub(crate) async fn create_workflow(&self, p: CreateWorkflowParams) -> Outcome {
        self.mutation("loops_create_workflow")?;
        let flags = p.flags()?;
        let given = crate::flags::pairs("--param", &p.params)?;
        let w = definition::WorkflowFlags {
            workflow: Some(&p.workflow),
            params: &given,
            unset_params: &[],
        };
        let target = definition::workflow_target(None, w, &flags)?;
        self.params_gate(&target.workflow, p.params.keys()).await?;
        self.create(p.name, flags, Target::Workflow(target)).await
    }

    /// `create`'s steps after the target: the schedule, the shared flags, the
    /// preflight when asked, then the client's create.
    async fn create(&self, name: String, flags: DefinitionFlags, target: Target) -> Outcome {
        one_schedule(&flags, true)?;
        flag_rules(&flags)?;
        if flags.notify_cmd.is_some() {
            self.code("notifyCmd")?;
        }
        if flags.until_cmd.is_some() {
            self.code("untilCmd")?;
        }
        if flags.notify_url.is_some() {
            self.webhook("notifyUrl")?;
        }
        let now = chrono::Utc::now();
        let def = definition::created(name, target, &flags, now)?;
        let client = self.writer()?;
        blocking(move || {
            if flags.preflight {
                definition::preflight(&client, &def.target)?;
            }
            let mut lp = client.create(def, now).map_err(|e| e.to_string())?;
            redact_loop(&mut lp);
            json(&lp)
        })
        .await
    }

    pub(crate) async fn edit(&self, p: EditParams) -> Outcome {
        self.mutation("loops_edit")?;
        let def_flags = p.flags()?;
        one_schedule(&def_flags, false)?;
        flag_rules(&def_flags)?;
        if p.shell && p.no_shell {
            return Err("--shell cannot be used with --no-shell".to_owned());
        }
        one_prompt(p.prompt.as_ref(), p.prompt_file.as_ref())?;
        let clear = p
            .clear
            .iter()
            .map(|f| f.parse::<ClearField>())
            .collect::<Result<Vec<_>, _>>()?;
        let agent = p.agent_options()?;
        let flags = EditFlags {
            def: def_flags,
            unlabels: p.unlabel,
            unset_env: p.unset_env,
            clear,
            cmd: p.cmd,
            no_shell: p.no_shell,
            shell: p.shell,
            args: p.args,
            provider: p.provider,
            prompt: p.prompt,
            prompt_file: p.prompt_file.map(PathBuf::from),
            agent,
            workflow: p.workflow.clone(),
            params: crate::flags::pairs("--param", &p.params)?,
            unset_params: p.unset_params.clone(),
        };
        if p.workflow.is_some() || !p.params.is_empty() {
            // The values the loop has after the edit, against the workflow it names
            // after it: pointing a loop at another workflow gives its kept values to
            // that workflow's params.
            let before = self.reader()?.get(&p.key).map_err(|e| e.to_string())?;
            if let Target::Workflow(w) = &before.target {
                let workflow = p.workflow.clone().unwrap_or_else(|| w.workflow.clone());
                let mut names: Vec<String> = w
                    .params
                    .keys()
                    .filter(|k| !p.unset_params.contains(k))
                    .cloned()
                    .collect();
                names.extend(p.params.keys().cloned());
                self.params_gate(&workflow, names.iter()).await?;
            }
        }
        let client = self.writer()?;
        let server = self.clone();
        blocking(move || {
            let now = chrono::Utc::now();
            let before = client.get(&p.key).map_err(|e| e.to_string())?;
            let def = definition::edited(&before, &flags, now)?;
            server.edit_gates(&before, &def)?;
            if flags.def.preflight {
                definition::preflight(&client, &def.target)?;
            }
            let mut after = client
                .edit(before.id.as_str(), def, now)
                .map_err(|e| e.to_string())?;
            redact_loop(&mut after);
            json(&after)
        })
        .await
    }

    /// An edit that changes what runs (the target but its timeout and idle timeout, a new
    /// notification command, a new `--until-cmd`) needs code; a new notification URL needs secrets
    /// ([`crate::gate`]).
    fn edit_gates(&self, before: &Loop, def: &LoopDefinition) -> Result<(), String> {
        if gate::changes_what_runs(&before.target, &def.target) {
            self.code(&format!("this edit of loop {:?}'s target", before.name))?;
        }
        if gate::sets_notify_cmd(before.notify.as_ref(), def.notify.as_ref()) {
            self.code("notifyCmd")?;
        }
        if gate::sets_until_cmd(&before.ops, &def.policy.ops) {
            self.code("untilCmd")?;
        }
        if gate::sets_notify_url(before.notify.as_ref(), def.notify.as_ref()) {
            self.webhook("notifyUrl")?;
        }
        Ok(())
    }
}

/// The schedule fields are one choice: exactly one on create, at most one on edit
/// (the CLI's clap group says the same).
fn one_schedule(f: &DefinitionFlags, required: bool) -> Result<(), String> {
    let given: Vec<&str> = [
        ("--at", f.at.is_some()),
        ("--every", f.every.is_some()),
        ("--cron", f.cron.is_some()),
        ("--dynamic", f.dynamic.is_some()),
    ]
    .into_iter()
    .filter(|(_, given)| *given)
    .map(|(flag, _)| flag)
    .collect();
    match given.as_slice() {
        [] if required => Err("a schedule is required: --at, --every, --cron or --dynamic".into()),
        [_, _, ..] => Err(format!(
            "{} cannot be used with {} (give one schedule)",
            given[0], given[1]
        )),
        _ => Ok(()),
    }
}

/// A prompt is given one way (the CLI's `conflicts_with`).
fn one_prompt(prompt: Option<&String>, prompt_file: Option<&String>) -> Result<(), String> {
    if prompt.is_some() && prompt_file.is_some() {
        return Err("--prompt cannot be used with --prompt-file".to_owned());
    }
    Ok(())
}

/// The other rules the CLI's parser enforces.
fn flag_rules(f: &DefinitionFlags) -> Result<(), String> {
    if f.account_tool.is_some() && f.account.is_none() {
        return Err("--account-tool needs --account".to_owned());
    }
    Ok(())
}
