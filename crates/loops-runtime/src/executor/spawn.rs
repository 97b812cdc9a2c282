//! Starting a run's process: the program resolved (argv or /bin/sh), its cwd checked,
//! spawned in a process group of its own that dies with this process, errors in words.

use super::*;

/// A spawned child: its pid (also its process group id) and our ends of its pipes.
/// The `std` child handle is dropped at once: it never reaps (the [`Reaper`] does).
pub(super) struct Spawned {
    pub(super) pid: u32,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) stdout: Option<ChildStdout>,
    pub(super) stderr: Option<ChildStderr>,
}

/// Builds and spawns the child, or explains why it could not start.
pub(super) fn spawn(invocation: &Invocation) -> Result<Spawned, String> {
    #[cfg(target_os = "linux")]
    if DIE_WITH_PARENT.load(std::sync::atomic::Ordering::SeqCst) {
        return spawn_dying_with_parent(invocation);
    }
    let child = spawn_std(invocation)?;
    into_async(child).map_err(|e| format!("cannot watch the process's pipes: {e}"))
}

/// What to execute for an invocation: the file, argv (argv[0] included), and the
/// program's name as errors show it.
pub(super) struct Program {
    pub(super) path: OsString,
    pub(super) argv: Vec<OsString>,
    pub(super) shown: String,
}

pub(super) fn program_of(invocation: &Invocation) -> Result<Program, String> {
    if let Some(cwd) = &invocation.cwd {
        check_cwd(cwd)?;
    }
    let args = invocation.args.iter().map(OsString::from);
    Ok(if invocation.shell {
        Program {
            path: SHELL.into(),
            argv: vec![
                SHELL.into(),
                "-c".into(),
                shell_command_line(&invocation.program, &invocation.args).into(),
            ],
            shown: SHELL.to_owned(),
        }
    } else if invocation.program.contains('/') {
        // execve resolves it relative to the child's cwd; spawn errors say if it is missing.
        Program {
            path: invocation.program.clone().into(),
            argv: std::iter::once(invocation.program.clone().into())
                .chain(args)
                .collect(),
            shown: invocation.program.clone(),
        }
    } else {
        let Some(path) = resolve_executable_in(
            &invocation.program,
            &invocation.env,
            invocation.cwd.as_deref(),
        ) else {
            return Err(format!(
                "Executable not found in PATH: {}",
                invocation.program
            ));
        };
        // argv[0] stays the name as written, as a shell would pass it.
        Program {
            path: path.into_os_string(),
            argv: std::iter::once(invocation.program.clone().into())
                .chain(args)
                .collect(),
            shown: invocation.program.clone(),
        }
    })
}

/// A supervisor's spawn: the child gets SIGKILL when this process dies, started
/// without `fork` ([`crate::vfork`]).
#[cfg(target_os = "linux")]
pub(super) fn spawn_dying_with_parent(invocation: &Invocation) -> Result<Spawned, String> {
    let program = program_of(invocation)?;
    let spec = crate::vfork::Spec {
        path: &program.path,
        argv: program.argv.iter().map(OsString::as_os_str).collect(),
        env: invocation
            .env
            .iter()
            .map(|(k, v)| (std::ffi::OsStr::new(k), std::ffi::OsStr::new(v)))
            .collect(),
        cwd: invocation.cwd.as_deref(),
        piped_stdin: invocation.stdin.is_some(),
    };
    let child = crate::vfork::spawn(&spec)
        .map_err(|e| spawn_error(&program.shown, invocation.cwd.as_deref(), &e))?;
    let pid = child.pid;
    let pipes = (|| {
        Ok::<_, io::Error>((
            child
                .stdin
                .map(|fd| ChildStdin::from_std(std::process::ChildStdin::from(fd)))
                .transpose()?,
            ChildStdout::from_std(std::process::ChildStdout::from(child.stdout))?,
            ChildStderr::from_std(std::process::ChildStderr::from(child.stderr))?,
        ))
    })();
    match pipes {
        Ok((stdin, stdout, stderr)) => Ok(Spawned {
            pid,
            stdin,
            stdout: Some(stdout),
            stderr: Some(stderr),
        }),
        Err(e) => {
            // Never left running unwatched: stopped and reaped here.
            let _ = signal_group(pid, Signal::SIGKILL);
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            }
            Err(format!("cannot watch the process's pipes: {e}"))
        }
    }
}

/// The child's pipes as async streams.
pub(super) fn into_async(mut child: Child) -> io::Result<Spawned> {
    let pid = child.id();
    let pipes = (|| {
        Ok::<_, io::Error>((
            child.stdin.take().map(ChildStdin::from_std).transpose()?,
            child.stdout.take().map(ChildStdout::from_std).transpose()?,
            child.stderr.take().map(ChildStderr::from_std).transpose()?,
        ))
    })();
    match pipes {
        Ok((stdin, stdout, stderr)) => Ok(Spawned {
            pid,
            stdin,
            stdout,
            stderr,
        }),
        Err(e) => {
            // Never left running unwatched: stopped and reaped here.
            let _ = signal_group(pid, Signal::SIGKILL);
            let _ = child.wait();
            Err(e)
        }
    }
}

pub(super) fn spawn_std(invocation: &Invocation) -> Result<Child, String> {
    let program = program_of(invocation)?;
    let mut command = Command::new(&program.path);
    command.arg0(&program.argv[0]).args(&program.argv[1..]);
    command
        .env_clear()
        .envs(invocation.env.iter().map(|(name, value)| (name, value)))
        .stdin(if invocation.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so signals reach its descendants and a terminal's Ctrl-C on
        // the daemon does not reach the runs.
        .process_group(0);
    if let Some(cwd) = &invocation.cwd {
        command.current_dir(cwd);
    }
    command
        .spawn()
        .map_err(|e| spawn_error(&program.shown, invocation.cwd.as_deref(), &e))
}

/// Checks the working directory up front: the OS reports a missing cwd as the same
/// ENOENT as a missing executable.
pub(super) fn check_cwd(cwd: &Path) -> Result<(), String> {
    match cwd.metadata() {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "working directory {} is not a directory",
            cwd.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "working directory {} does not exist",
            cwd.display()
        )),
        Err(e) => Err(format!("working directory {}: {e}", cwd.display())),
    }
}

pub(super) fn spawn_error(program: &str, cwd: Option<&Path>, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => {
            let path = Path::new(program);
            let path = match cwd {
                Some(cwd) if path.is_relative() => cwd.join(path),
                _ => path.to_path_buf(),
            };
            if path.exists() {
                // The file is there, so what is missing is its `#!` interpreter.
                format!("failed to start {program}: its interpreter was not found ({e})")
            } else {
                format!("Executable not found: {program}")
            }
        }
        io::ErrorKind::PermissionDenied => format!("permission denied executing {program}"),
        _ => format!("failed to start {program}: {e}"),
    }
}

/// `command_line` followed by each arg as one shell word.
pub(super) fn shell_command_line(command_line: &str, args: &[String]) -> String {
    let mut line = command_line.to_owned();
    for arg in args {
        line.push(' ');
        line.push('\'');
        // Inside single quotes only `'` is special: close, escape it, reopen.
        line.push_str(&arg.replace('\'', r"'\''"));
        line.push('\'');
    }
    line
}
