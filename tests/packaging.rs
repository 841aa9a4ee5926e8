//! What a package ships besides the binary: `--version`, shell completions, the manual page,
//! and the systemd unit `deploy/novad.service` (checked by `systemd-analyze verify`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_novad");

fn novad(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "novad {args:?}: {out:?}");
    assert!(out.stderr.is_empty(), "novad {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn version_prints_the_package_version() {
    let v = novad(&["--version"]);
    assert_eq!(v.trim(), format!("novad {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn completions_are_scripts_for_each_shell_naming_the_subcommands() {
    let bash = novad(&["completions", "bash"]);
    assert!(bash.contains("complete "), "{bash}");
    assert!(bash.contains("run"), "{bash}");
    assert!(bash.contains("--inbox"), "{bash}");
    let zsh = novad(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef novad"), "{zsh}");
    let fish = novad(&["completions", "fish"]);
    assert!(fish.contains("complete -c novad"), "{fish}");
    let bad = Command::new(BIN)
        .args(["completions", "no-such-shell"])
        .output()
        .unwrap();
    assert!(!bad.status.success(), "an unknown shell is refused");
}

#[test]
fn the_manual_page_is_roff_and_lists_the_subcommands() {
    let man = novad(&["manpage"]);
    assert!(man.starts_with(".TH") || man.starts_with(".ie"), "{man}");
    assert!(man.contains(".TH novad 1"), "{man}");
    assert!(man.contains(".SH SUBCOMMANDS"), "{man}");
    assert!(man.contains("run"), "{man}");
    assert!(man.contains(env!("CARGO_PKG_VERSION")), "{man}");
}

fn unit_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/novad.service");
    std::fs::read_to_string(path).unwrap()
}

/// The unit's `Key=value` lines (comments and sections left out).
fn directives(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `unit` written as `novad.service` in a new directory, its binary replaced by the one built.
fn unit_file(dir: &Path, unit: &str) -> PathBuf {
    let text = unit.replace(
        "ExecStart=/usr/local/bin/novad ",
        &format!("ExecStart={BIN} "),
    );
    assert_ne!(text, unit, "ExecStart names /usr/local/bin/novad");
    let path = dir.join("novad.service");
    std::fs::write(&path, text).unwrap();
    path
}

fn verify(path: &Path) -> Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(path)
        .output()
        .expect("systemd-analyze (Debian package `systemd`; .ci/run installs it)")
}

/// Lines of `systemd-analyze`'s stderr about the unit under test (other lines are about the
/// host's units).
fn complaints(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("novad.service"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_systemd_unit_has_the_hardening_and_passes_systemd_analyze_verify() {
    let unit = unit_text();
    let d = directives(&unit);
    let has = |k: &str, v: &str| d.iter().any(|(a, b)| a == k && b == v);
    for (k, v) in [
        ("User", "novad"),
        ("Group", "novad"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        (
            "ReadWritePaths",
            "/var/lib/novad/store /var/lib/novad/inbox",
        ),
        ("Restart", "on-failure"),
        ("RestartSec", "5"),
        ("RestartPreventExitStatus", "3"),
        ("CapabilityBoundingSet", ""),
        ("KillSignal", "SIGTERM"),
        ("TimeoutStopSec", "120"),
        ("LimitNOFILE", "8192"),
        ("ProtectKernelTunables", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        (
            "ExecStart",
            "/usr/local/bin/novad run --inbox /var/lib/novad/inbox --store /var/lib/novad/store",
        ),
    ] {
        assert!(has(k, v), "{k}={v} missing from the unit");
    }
    // the flags ExecStart passes are the daemon's
    let help = novad(&["run", "--help"]);
    assert!(
        help.contains("--inbox") && help.contains("--store"),
        "{help}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = verify(&unit_file(dir.path(), &unit));
    assert_eq!(complaints(&out), Vec::<String>::new(), "{out:?}");
    assert!(out.status.success(), "{out:?}");

    // the check sees a broken unit: a relative ExecStart and an unknown directive
    let broken = unit.replace(
        "ExecStart=/usr/local/bin/novad ",
        "ExecStart=novad-nowhere ",
    ) + "\n[Service]\nNoSuchDirective=yes\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("novad.service");
    std::fs::write(&path, broken).unwrap();
    let out = verify(&path);
    assert!(!complaints(&out).is_empty(), "{out:?}");
    assert!(!out.status.success(), "{out:?}");
}
