//! Starting a child that dies with this process, without `fork` (Linux).
//!
//! A supervisor sets every child's parent-death signal, so a supervisor that is killed
//! cannot leave a run going with nobody to enforce its deadline. The standard library
//! can only do that in a `pre_exec` step, which makes it `fork` instead of using
//! `posix_spawn`: the page tables are copied, and until the child's `exec` both
//! processes take a copy-on-write fault on every page either writes. In a supervisor
//! starting hundreds of runs a second that was most of its CPU (BENCHMARKS §18).
//!
//! [`spawn`] does what `posix_spawn` does instead: `clone(CLONE_VM | CLONE_VFORK)`, so
//! the child borrows this process's memory and the calling thread waits until the
//! child has exec'd or given up. Everything the child needs (paths, argv, envp, file
//! descriptors) is prepared before the clone; the child makes only system calls,
//! allocates nothing, takes no lock and touches no shared state but the error slot it
//! writes before `_exit`.

// The module exists for its `clone` and the child's system calls: each `unsafe`
// block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A started child: its pid and this side of its pipes.
pub(crate) struct Child {
    pub pid: u32,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// What a child is started with, resolved by the caller.
pub(crate) struct Spec<'a> {
    /// The file to execute (an absolute path, or relative to `cwd`).
    pub path: &'a OsStr,
    /// argv, argv[0] included.
    pub argv: Vec<&'a OsStr>,
    /// The whole environment.
    pub env: Vec<(&'a OsStr, &'a OsStr)>,
    pub cwd: Option<&'a Path>,
    /// A pipe for stdin, else `/dev/null`.
    pub piped_stdin: bool,
}

/// The stack the child runs on until `exec`: it calls a few system calls only.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Where the child says what failed (before `_exit(127)`); read by the parent after
/// the clone returns, when the child has exec'd or exited.
#[repr(C)]
struct ErrorSlot {
    errno: i32,
}

/// Everything the child reads, prepared by the parent; pointers stay valid while the
/// parent waits inside `clone`.
#[repr(C)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// The fds to put at 0, 1 and 2.
    stdio: [RawFd; 3],
    parent: libc::pid_t,
    error: *mut ErrorSlot,
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in a program, argument or environment value",
        )
    })
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// `fd`, or a copy of it numbered 3 or more (close-on-exec), so that putting the
/// child's descriptors in place at 0, 1 and 2 never overwrites another of them.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).map(|copy| {
            // SAFETY: F_DUPFD_CLOEXEC just created `copy`; nobody else owns it.
            unsafe { OwnedFd::from_raw_fd(copy) }
        })?,
    )
}

/// Starts `spec` as a child of this process that gets SIGKILL when the calling thread
/// ends (`PR_SET_PDEATHSIG`), leads its own process group, has its stdout and stderr
/// piped and its signal mask and handlers reset, as `std::process::Command` would.
pub(crate) fn spawn(spec: &Spec<'_>) -> io::Result<Child> {
    let path = cstring(spec.path)?;
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<io::Result<_>>()?;
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| {
            let mut pair = k.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&pair))
        })
        .collect::<io::Result<_>>()?;
    let cwd = spec.cwd.map(|c| cstring(c.as_os_str())).transpose()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());

    let (stdin_child, stdin_parent) = if spec.piped_stdin {
        let (read, write) = pipe()?;
        (read, Some(write))
    } else {
        let null = std::fs::OpenOptions::new().read(true).open("/dev/null")?;
        (OwnedFd::from(null), None)
    };
    let stdin_child = above_stdio(stdin_child)?;
    let (stdout_parent, stdout_child) = pipe()?;
    let (stderr_parent, stderr_child) = pipe()?;
    let (stdout_child, stderr_child) = (above_stdio(stdout_child)?, above_stdio(stderr_child)?);

    let mut error = ErrorSlot { errno: 0 };
    let mut args = ChildArgs {
        path: path.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        stdio: [
            stdin_child.as_raw_fd(),
            stdout_child.as_raw_fd(),
            stderr_child.as_raw_fd(),
        ],
        parent: nix::unistd::getpid().as_raw(),
        error: &mut error,
    };
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down: the child starts at its (16-byte aligned) top.
    let top = {
        let end = stack.as_mut_ptr_range().end as usize;
        (end & !15) as *mut libc::c_void
    };

    // Every signal blocked on this thread across the clone, so no handler of ours runs
    // in the child while it borrows our memory; the child resets handlers and its mask
    // before exec, and we restore ours right after.
    let saved = nix::sys::signal::SigSet::all()
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_SETMASK)?;
    // SAFETY: `child_main` runs on `stack` (ours, alive until clone returns: with
    // CLONE_VFORK this thread is suspended until the child execs or exits) and reads
    // only `args`, whose pointers (path, argv, envp, cwd — all NUL-terminated, the
    // arrays NULL-terminated — and the error slot) live in this frame until then. It
    // makes only async-signal-safe system calls and `_exit`s on failure, never
    // returning into our code; see `child_main`.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut args as *mut ChildArgs).cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // Cannot fail (the mask and `how` are valid); the child is started either way.
    let _ = saved.thread_set_mask();
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    // The child has exec'd (its copies of our descriptors closed on exec) or exited.
    drop((stdin_child, stdout_child, stderr_child));
    // Written by the child through the pointer in `args`, which clone was given.
    // SAFETY: `error` is a live, aligned i32 of this frame.
    let child_errno = unsafe { std::ptr::read_volatile(&error.errno) };
    if child_errno != 0 {
        // Our own child, which has exited (`_exit(127)`).
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(child_errno));
    }
    Ok(Child {
        pid: pid as u32,
        stdin: stdin_parent,
        stdout: stdout_parent,
        stderr: stderr_parent,
    })
}

/// The child, until `exec`: it shares the parent's memory, so it only makes system
/// calls on data the parent prepared, and reports a failure through the error slot.
extern "C" fn child_main(raw: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `raw` is the `ChildArgs` the parent passed to clone, alive (the parent
    // is suspended) and not written by anyone while we read it.
    let args = unsafe { &*(raw as *const ChildArgs) };
    let fail = |errno: i32| -> ! {
        // SAFETY: the slot is the parent's, which waits; `_exit` ends this process
        // without running anything of the parent's (no atexit handlers, no unwinding).
        unsafe {
            (*args.error).errno = if errno == 0 { libc::EINVAL } else { errno };
            libc::_exit(127)
        }
    };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY (the block): each call below is a thin libc wrapper around one system
    // call (async-signal-safe per POSIX), on arguments prepared by the parent or on
    // this frame's own sigaction/sigset values; none allocates or takes a lock.
    unsafe {
        // Handlers are the parent's (a copy): a caught signal goes back to its default,
        // an ignored one stays ignored — except SIGPIPE, which Rust ignores and
        // children expect at its default, as std's Command does.
        for signal in 1..=libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(errno());
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            fail(errno());
        }
        // The parent may have died between the clone and prctl: then no signal comes.
        if libc::getppid() != args.parent {
            fail(libc::ESRCH);
        }
        // Every source is numbered 3 or more (`above_stdio`); dup2's copies are not
        // close-on-exec.
        for (target, &fd) in (0..).zip(args.stdio.iter()) {
            if libc::dup2(fd, target) < 0 {
                fail(errno());
            }
        }
        if !args.cwd.is_null() && libc::chdir(args.cwd) != 0 {
            fail(errno());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(args.path, args.argv, args.envp);
        fail(errno())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn read_all(fd: OwnedFd) -> String {
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        text
    }

    fn wait(pid: u32) -> nix::sys::wait::WaitStatus {
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None).unwrap()
    }

    fn sh<'a>(script: &'a str, env: Vec<(&'a OsStr, &'a OsStr)>) -> Spec<'a> {
        Spec {
            path: OsStr::new("/bin/sh"),
            argv: vec![OsStr::new("sh"), OsStr::new("-c"), OsStr::new(script)],
            env,
            cwd: None,
            piped_stdin: false,
        }
    }

    #[test]
    fn the_child_gets_its_argv_env_cwd_stdio_and_group_and_exits_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = sh(
            "echo \"$0 $FOO\"; pwd; echo err >&2; ps -o pgid= -p $$; read line; echo \"in: $line\"; exit 3",
            vec![
                (OsStr::new("FOO"), OsStr::new("bar baz")),
                (OsStr::new("PATH"), OsStr::new("/usr/bin:/bin")),
            ],
        );
        spec.cwd = Some(dir.path());
        spec.piped_stdin = true;
        let child = spawn(&spec).unwrap();
        std::fs::File::from(child.stdin.unwrap())
            .write_all(b"hello\n")
            .unwrap();
        let out = read_all(child.stdout);
        let err = read_all(child.stderr);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "sh bar baz");
        assert_eq!(
            std::fs::canonicalize(lines[1]).unwrap(),
            std::fs::canonicalize(dir.path()).unwrap()
        );
        // It leads its own process group.
        assert_eq!(lines[2].trim(), child.pid.to_string());
        assert_eq!(lines[3], "in: hello");
        assert_eq!(err, "err\n");
        assert_eq!(
            wait(child.pid),
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(child.pid as i32), 3)
        );
    }

    const SIGNAL_STATE: &str = "grep -E '^(SigBlk|SigIgn):' /proc/self/status";

    #[test]
    fn the_child_gets_the_signal_state_std_gives_a_child() {
        // This test process ignores SIGPIPE (Rust does) and blocks signals for the
        // clone: neither reaches the child, which is as std's Command leaves one.
        let child = spawn(&sh(
            SIGNAL_STATE,
            vec![(OsStr::new("PATH"), OsStr::new("/usr/bin:/bin"))],
        ))
        .unwrap();
        let out = read_all(child.stdout);
        wait(child.pid);
        let std_child = std::process::Command::new("/bin/sh")
            .args(["-c", SIGNAL_STATE])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        // Signals 32 and 33 are the C library's own (thread cancellation, set*id):
        // glibc's posix_spawn ignores them in the child, we leave them as exec does.
        let masks = |text: &str| -> Vec<u64> {
            text.lines()
                .filter_map(|l| l.split('\t').nth(1))
                .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap() & !(0b11 << 31))
                .collect()
        };
        assert_eq!(
            masks(&out),
            masks(&String::from_utf8_lossy(&std_child.stdout))
        );
        assert_eq!(masks(&out), [0, 0], "{out}");
    }

    #[test]
    fn the_child_is_killed_when_the_thread_that_started_it_ends() {
        let spec_path = OsStr::new("/bin/sleep");
        let pid = std::thread::spawn(move || {
            spawn(&Spec {
                path: spec_path,
                argv: vec![OsStr::new("sleep"), OsStr::new("30")],
                env: Vec::new(),
                cwd: None,
                piped_stdin: false,
            })
            .unwrap()
            .pid
        })
        .join()
        .unwrap();
        assert_eq!(
            wait(pid),
            nix::sys::wait::WaitStatus::Signaled(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
                false
            )
        );
    }

    #[test]
    fn a_missing_program_is_an_error_and_leaves_no_child() {
        let spec = Spec {
            path: OsStr::new("/nonexistent/program"),
            argv: vec![OsStr::new("program")],
            env: Vec::new(),
            cwd: None,
            piped_stdin: false,
        };
        // This thread's children, zombies included. Not `waitpid(-1)`: the other tests
        // of this binary run beside this one, and that would reap (and report) their
        // children.
        let children = || std::fs::read_to_string("/proc/thread-self/children").unwrap();
        let before = children();
        let error = spawn(&spec).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        // Reaped already: no child of ours is left.
        assert_eq!(children(), before);
    }

    #[test]
    fn a_missing_cwd_is_an_error() {
        let mut spec = sh("true", Vec::new());
        let missing = Path::new("/nonexistent/dir");
        spec.cwd = Some(missing);
        assert_eq!(spawn(&spec).err().unwrap().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_nul_byte_is_refused_before_anything_starts() {
        let spec = sh("true", vec![(OsStr::new("A"), OsStr::from_bytes(b"x\0y"))]);
        assert_eq!(
            spawn(&spec).err().unwrap().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
