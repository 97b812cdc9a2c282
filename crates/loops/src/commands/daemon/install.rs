//! `loops daemon install`: a systemd user unit or a launchd agent that starts the
//! daemon at login, its paths quoted and escaped for the file that names them.

use super::*;

pub(super) fn install(ctx: &Context, args: DaemonInstallArgs) -> Result<Exit, Failure> {
    if ctx.store_url().is_some() {
        // The service would otherwise run on the data dir's SQLite file, silently.
        return Err(Failure::usage(
            "daemon install does not carry --store / LOOPS_STORE into the service yet (its \
             URL may hold a password): install without it, then add \
             `EnvironmentFile=` with LOOPS_STORE=… (mode 0600) to the unit by hand",
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find own executable: {e}")))?;
    // Both go into a service file: absolute (the service's cwd is not ours) and
    // printable (a newline would end the directive and start another).
    let exe = service_path("executable", &exe)?;
    let dir = service_path("data dir", &ctx.data_dir()?)?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| Failure::failed("HOME is not set"))?;
    let (path, contents, commands) = if cfg!(target_os = "macos") {
        let path = home.join("Library/LaunchAgents/dev.loops.daemon.plist");
        let commands = vec![format!("launchctl load -w {}", path.display())];
        (path, launch_agent(&exe, &dir), commands)
    } else {
        let path = home.join(".config/systemd/user/loops.service");
        let commands = vec![
            "systemctl --user daemon-reload".to_owned(),
            "systemctl --user enable --now loops.service".to_owned(),
        ];
        (path, systemd_unit(&exe, &dir), commands)
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::failed(format!("cannot create {}: {e}", parent.display())))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &contents)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| Failure::failed(format!("cannot write {}: {e}", path.display())))?;
    if args.enable {
        for command in &commands {
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(command)
                .status();
            if !status.is_ok_and(|s| s.success()) {
                return Err(Failure::failed(format!("`{command}` failed")));
            }
        }
    }
    if ctx.json {
        print_json(
            &serde_json::json!({ "path": path, "commands": commands, "enabled": args.enable }),
        )?;
    } else {
        outln!("wrote {}", path.display())?;
        if args.enable {
            outln!("enabled and started")?;
        } else {
            outln!("to enable and start it, run:")?;
            for command in &commands {
                outln!("  {command}")?;
            }
        }
    }
    Ok(Exit::Success)
}

/// `path` made absolute, as text fit for a service file: UTF-8 (units and plists are
/// UTF-8 text) without control characters (a newline would end the directive and
/// start another, such as `ExecStartPre=`).
fn service_path(what: &str, path: &Path) -> Result<String, Failure> {
    let abs = std::path::absolute(path).map_err(|e| {
        Failure::usage(format!(
            "{what} {}: cannot make it absolute: {e}",
            path.display()
        ))
    })?;
    let Some(text) = abs.to_str() else {
        return Err(Failure::usage(format!(
            "{what} {abs:?} is not valid UTF-8; a service file cannot name it"
        )));
    };
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(Failure::usage(format!(
            "{what} {text:?} contains a control character ({c:?}); a service file cannot \
             name it safely"
        )));
    }
    Ok(text.to_owned())
}

/// One double-quoted word of a systemd unit (systemd.syntax(7)): `\` and `"` are
/// backslash-escaped and `%` is doubled (else it starts a specifier such as `%h`). In
/// `ExecStart=` a `$` is doubled too (else it expands a variable); `Environment=`
/// takes `$` literally.
fn systemd_quote(text: &str, exec: bool) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if exec => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The user unit. `exe` and `dir` come from [`service_path`] (absolute, no control
/// characters); everything else is fixed text.
fn systemd_unit(exe: &str, dir: &str) -> String {
    format!(
        "[Unit]\nDescription=loops scheduler daemon\nDocumentation=man:loops(1)\n\n[Service]\nType=simple\nExecStart={} daemon run\nEnvironment={}\nRestart=on-failure\nRestartSec=5\nKillMode=process\nKillSignal=SIGTERM\nTimeoutStopSec=30\n\n[Install]\nWantedBy=default.target\n",
        systemd_quote(exe, true),
        systemd_quote(&format!("{DATA_DIR_ENV}={dir}"), false),
    )
}

/// Text for a plist `<string>`: the five XML special characters escaped.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The LaunchAgent plist; `exe` and `dir` come from [`service_path`].
fn launch_agent(exe: &str, dir: &str) -> String {
    let log = xml_escape(&Path::new(dir).join(LOG_FILE).display().to_string());
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>dev.loops.daemon</string>
  <key>ProgramArguments</key>
  <array><string>{}</string><string>daemon</string><string>run</string></array>
  <key>EnvironmentVariables</key>
  <dict><key>{DATA_DIR_ENV}</key><string>{}</string></dict>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
  <key>AbandonProcessGroup</key><true/>
  <key>StandardOutPath</key><string>{log}</string>
  <key>StandardErrorPath</key><string>{log}</string>
</dict>
</plist>
"#,
        xml_escape(exe),
        xml_escape(dir),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn systemd_unit_quotes_and_escapes() {
        let unit = systemd_unit("/opt/my $bin/loops", "/home/a b/100%\\\"x\"");
        assert!(
            unit.contains("ExecStart=\"/opt/my $$bin/loops\" daemon run\n"),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=\"LOOPS_DATA_DIR=/home/a b/100%%\\\\\\\"x\\\"\"\n"),
            "{unit}"
        );
        assert_eq!(
            unit.lines()
                .filter(|l| l.starts_with("Environment="))
                .count(),
            1
        );
    }

    #[test]
    fn systemd_environment_keeps_dollar_literal() {
        let unit = systemd_unit("/bin/loops", "/data/$HOME");
        assert!(
            unit.contains("Environment=\"LOOPS_DATA_DIR=/data/$HOME\"\n"),
            "{unit}"
        );
    }

    #[test]
    fn plist_escapes_xml() {
        let plist = launch_agent("/opt/a&b/loops", "/d/<x> \"q\" 'y'");
        assert!(
            plist.contains("<string>/opt/a&amp;b/loops</string>"),
            "{plist}"
        );
        assert!(
            plist.contains("<string>/d/&lt;x&gt; &quot;q&quot; &apos;y&apos;</string>"),
            "{plist}"
        );
        assert!(plist.contains(
            "<key>StandardOutPath</key><string>/d/&lt;x&gt; &quot;q&quot; &apos;y&apos;/daemon.log</string>"
        ));
    }

    #[test]
    fn service_paths_are_absolute_and_printable() {
        let rel = service_path("data dir", Path::new("rel/dir")).unwrap();
        assert!(rel.starts_with('/') && rel.ends_with("/rel/dir"), "{rel}");
        for bad in ["/a\nExecStartPre=/bin/true", "/a\rb", "/a\tb", "/a\u{7f}b"] {
            let Err(Failure::Error { code, message }) = service_path("data dir", Path::new(bad))
            else {
                panic!("{bad:?} accepted");
            };
            assert_eq!(code.code(), 2);
            assert!(message.contains("control character"), "{message}");
            assert!(!message.contains('\n'), "{message}");
        }
    }
}
