//! The shell scripts that write Carrier2's config files into a patched
//! container, reload Carrier2 and read the config back, over `exec`; and
//! what their output means.

use crate::{
    carrier_config::{CONFIG_PATH, CarrierConfig, ERROR_LOG, PID_FILE},
    tls::TlsFiles,
};

/// What Carrier2 logs when it has taken a config.
pub const BOOTSTRAP_MARK: &str = "Bootstrap starting";
/// What a Rust program prints when it gives up (a config Carrier2 refused).
pub const PANIC_MARK: &str = "thread 'main' panicked";

/// A here-document delimiter that no line of `content` equals.
fn delimiter(content: &str) -> String {
    let mut candidate = "PONTOON_EOF".to_string();
    let mut n = 0;
    while content.lines().any(|line| line == candidate) {
        n += 1;
        candidate = format!("PONTOON_EOF_{n}");
    }
    candidate
}

/// Content as a file holds it after a here-document: ending in a newline.
pub fn as_file(content: &str) -> String {
    if content.ends_with('\n') {
        content.to_string()
    } else {
        format!("{content}\n")
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The files carrier2mount keeps in a patched container: TLS material first,
/// the config last (Carrier2 reads the config, which names the others).
pub fn desired_files(config: &CarrierConfig, tls: &TlsFiles) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = tls
        .iter()
        .map(|(path, content)| (path.clone(), as_file(content)))
        .collect();
    files.push((CONFIG_PATH.to_string(), as_file(&config.to_yaml())));
    files
}

/// What [`configure_script`] prints when every file already holds its
/// content (and Carrier2 is left alone).
pub const UNCHANGED_MARK: &str = "carrier2mount: config unchanged";

/// A script (for `busybox sh` on stdin) that compares every file with what
/// it should hold and, unless all do, writes them and reloads Carrier2 (see
/// [`write_script`]): one exec per pod and change, not a read-back and then
/// a write (each exec is a round trip through the API server and kubelet).
///
/// Each file is framed by its path and followed by `|`, so a difference in
/// trailing newlines is still a difference (`$(...)` strips them).
pub fn configure_script(files: &[(String, String)]) -> String {
    let want: String = files
        .iter()
        .map(|(path, content)| format!("== {path}\n{content}|"))
        .collect();
    let end = delimiter(&want);
    let got: String = files
        .iter()
        .map(|(path, _)| {
            let quoted = shell_quote(path);
            format!("printf '== %s\\n' {quoted}; cat {quoted} 2>/dev/null; printf '|'; ")
        })
        .collect();
    let mut script = format!(
        "want=$(cat <<'{end}'\n{want}\n{end}\n)\n\
         got=$({{ {got}}})\n\
         if [ \"$got\" = \"$want\" ]; then echo '{UNCHANGED_MARK}'; exit 0; fi\n"
    );
    script.push_str(&write_script(files));
    script
}

/// Every script ends by exiting: the shell must not wait for the end of its
/// input, which not every exec transport passes on.
pub const SCRIPT_END: &str = "exit 0\n";

/// A script that prints the config.
pub fn cat_config_script() -> String {
    format!("cat {CONFIG_PATH}\n{SCRIPT_END}")
}

/// A script (for `busybox sh` on stdin) that writes every file, reloads
/// Carrier2 with the config and prints its log. It exits non-zero, and
/// empties the config so that a later read-back does not take it for done,
/// when Carrier2 did not start with it.
///
/// The reload is Gefyra's: a running Carrier2 (Pingora) hands its listening
/// sockets over to a new process started with `-u` once it gets SIGQUIT;
/// with none running, the new one starts without `-u` (an upgrade would wait
/// for sockets nobody sends). The pid file is trusted only if that process
/// is a carrier2, so a stale file never signals some other process. A
/// container that has just restarted on Carrier2 may hold its ports before
/// it writes its pid file: a fresh start that fails then is followed by one
/// upgrade from the carrier2 the pid file names by now. Only shell builtins
/// and `cat` are used, which Carrier2's image has.
pub fn write_script(files: &[(String, String)]) -> String {
    let mut script = String::new();
    for (path, content) in files {
        let end = delimiter(content);
        script.push_str(&format!(
            "cat > {} <<'{end}'\n{content}{end}\n",
            shell_quote(path)
        ));
    }
    script.push_str(&format!(
        r#"upgrade=
take_over() {{
  pid=$(cat {PID_FILE} 2>/dev/null)
  [ -n "$pid" ] || return 1
  case "$(cat "/proc/$pid/cmdline" 2>/dev/null)" in
    *carrier2*) kill -QUIT "$pid" 2>/dev/null && upgrade=-u ;;
    *) return 1 ;;
  esac
}}
take_over
: > {ERROR_LOG}
carrier2 -c {CONFIG_PATH} $upgrade -d >> {ERROR_LOG} 2>&1
status=$?
if [ "$status" -ne 0 ] && [ -z "$upgrade" ] && take_over; then
  : > {ERROR_LOG}
  carrier2 -c {CONFIG_PATH} -u -d >> {ERROR_LOG} 2>&1
  status=$?
fi
log=$(cat {ERROR_LOG})
printf '%s\n' "$log"
case "$log" in
  *"{PANIC_MARK}"*) ok=no ;;
  *"{BOOTSTRAP_MARK}"*) ok=yes ;;
  *) ok=no ;;
esac
if [ "$status" -ne 0 ] || [ "$ok" != yes ]; then
  : > {CONFIG_PATH}
  echo "carrier2 did not start with the new config (exit status $status)" >&2
  exit 1
fi
"#
    ));
    script.push_str(SCRIPT_END);
    script
}

/// Whether the output of [`write_script`] says Carrier2 took the config.
pub fn reload_succeeded(exit_code: i32, output: &str) -> bool {
    exit_code == 0 && output.contains(BOOTSTRAP_MARK) && !output.contains(PANIC_MARK)
}

/// The last lines of an output, for messages.
pub fn tail(output: &str, lines: usize) -> String {
    let all: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carrier_config::tests::sample_config;

    #[test]
    fn the_configure_script_compares_every_file_before_it_writes() {
        let tls: TlsFiles = [(
            "/tmp/from_k8s_secret_cert_all.pem".to_string(),
            "PEM".to_string(),
        )]
        .into();
        let files = desired_files(&sample_config(), &tls);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].1, "PEM\n");
        assert_eq!(files[1].0, CONFIG_PATH);
        let script = configure_script(&files);
        assert!(
            script.starts_with(
                "want=$(cat <<'PONTOON_EOF'\n== /tmp/from_k8s_secret_cert_all.pem\nPEM\n|== /tmp/config.yaml\n{\n  \"version\": 1,\n"
            ),
            "{script}"
        );
        assert!(script.contains(
            "got=$({ printf '== %s\\n' '/tmp/from_k8s_secret_cert_all.pem'; cat '/tmp/from_k8s_secret_cert_all.pem' 2>/dev/null; printf '|'; \
             printf '== %s\\n' '/tmp/config.yaml'; cat '/tmp/config.yaml' 2>/dev/null; printf '|'; })\n"
        ));
        assert!(script.contains(&format!(
            "if [ \"$got\" = \"$want\" ]; then echo '{UNCHANGED_MARK}'; exit 0; fi\n"
        )));
        assert!(script.ends_with(&write_script(&files)));
    }

    #[test]
    fn write_script_writes_reloads_and_checks() {
        let files = vec![
            ("/tmp/a.pem".to_string(), "x\nPONTOON_EOF\ny\n".to_string()),
            (CONFIG_PATH.to_string(), "version: 1\n".to_string()),
        ];
        let script = write_script(&files);
        assert!(script.starts_with(
            "cat > '/tmp/a.pem' <<'PONTOON_EOF_1'\nx\nPONTOON_EOF\ny\nPONTOON_EOF_1\n\
             cat > '/tmp/config.yaml' <<'PONTOON_EOF'\nversion: 1\nPONTOON_EOF\n"
        ));
        assert!(
            script.contains("carrier2 -c /tmp/config.yaml $upgrade -d >> /tmp/carrier.log 2>&1\n")
        );
        assert!(script.contains("*carrier2*) kill -QUIT \"$pid\" 2>/dev/null && upgrade=-u ;;"));
        // A fresh start that lost the race with a Carrier2 still starting
        // hands over from it once.
        assert!(script.contains(
            "if [ \"$status\" -ne 0 ] && [ -z \"$upgrade\" ] && take_over; then\n  : > /tmp/carrier.log\n  carrier2 -c /tmp/config.yaml -u -d >> /tmp/carrier.log 2>&1\n"
        ));
        assert!(script.contains(": > /tmp/config.yaml\n"));
        assert!(script.ends_with("fi\nexit 0\n"));
    }

    #[test]
    #[cfg(unix)]
    fn a_fresh_start_that_finds_the_ports_taken_hands_over_once() {
        use std::process::{Command, Stdio};
        let dir = std::env::temp_dir().join(format!("carrier2mount-race-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let tmp = format!("{}/", dir.display());
        let mut serving = Command::new("bash")
            .args(["-c", "exec -a carrier2 sleep 30"])
            .spawn()
            .unwrap();
        let fake = format!(
            "#!/bin/sh
             case \" $* \" in\n               *' -u '*) echo 'INFO Bootstrap starting'; echo \"upgrading from pid $(cat {tmp}carrier2.pid)\"; exit 0 ;;\n             esac\n             echo {pid} > {tmp}carrier2.pid\n             echo \"{PANIC_MARK} at src/main.rs: a Carrier2 already serves (its ports are taken)\" >&2\n             exit 1\n",
            pid = serving.id()
        );
        let fake_path = bin.join("carrier2");
        std::fs::write(&fake_path, fake).unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(&fake_path)
            .status()
            .unwrap();
        let files = vec![(CONFIG_PATH.to_string(), "version: 1\n".to_string())];
        let script = write_script(&files).replace("/tmp/", &tmp);
        let mut shell = Command::new("sh")
            .arg("-s")
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        shell
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let output = shell.wait_with_output().unwrap();
        let _ = serving.kill();
        let _ = serving.wait();
        let config = std::fs::read_to_string(dir.join("config.yaml")).unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            reload_succeeded(output.status.code().unwrap_or(-1), &stdout),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("upgrading from pid {}", serving.id())),
            "{stdout}"
        );
        assert_eq!(config, "version: 1\n");
    }

    #[test]
    fn reload_needs_bootstrap_and_no_panic() {
        assert!(reload_succeeded(0, "INFO Bootstrap starting\n"));
        assert!(!reload_succeeded(1, "Bootstrap starting"));
        assert!(!reload_succeeded(
            0,
            "Bootstrap starting\nthread 'main' panicked at src/main.rs: bad config"
        ));
        assert!(!reload_succeeded(0, ""));
        assert_eq!(tail("a\n\nb\nc\n", 2), "b | c");
    }
}
