//! An app's program as a user or an operator runs it (the generated `main`'s command line,
//! `ruststream::app::cli::main_from`), without building the example's binary: the test binary
//! runs again as the program.
//!
//! A test crate names one test `as_the_app` that calls [`as_the_app`]; in the parent it returns
//! at once, in a child started by [`program`] it runs the app with the child's arguments and
//! exits with its status. The child runs only that test (`--exact as_the_app`), its harness lines
//! ("running 1 test") removed by [`program_lines`].

use std::process::{Command, ExitCode, Output, Stdio};

use ruststream::App;

/// Carries the program's arguments from the parent to the child.
const ARGS: &str = "RUSTSTREAM_TEST_PROGRAM_ARGS";
/// Separates the arguments in [`ARGS`].
const SEP: char = '\u{1f}';

/// In a child started by [`program`]: runs `app`'s command line, named `name`, with the
/// arguments the parent gave, and exits with its status. In the parent: returns.
pub fn as_the_app<A: App>(name: &str, app: impl FnOnce() -> A) {
    let Ok(args) = std::env::var(ARGS) else {
        return; // Not a child: nothing to do.
    };
    let args = std::iter::once(name.to_owned())
        .chain(args.split(SEP).filter(|a| !a.is_empty()).map(str::to_owned));
    let code = ruststream::app::cli::main_from(app, args);
    std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
}

/// The app's program with arguments `args`: this test binary running only `as_the_app`, with
/// the settings the command line reads from the environment removed and logs at INFO without
/// colours.
pub fn program<const N: usize>(args: [&str; N]) -> Command {
    let exe = std::env::current_exe().expect("the test's path");
    let mut command = Command::new(exe);
    command
        .args([
            "--exact",
            "as_the_app",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env(ARGS, args.join(&SEP.to_string()))
        .env_remove("NATS_URL")
        .env_remove("RUSTSTREAM_EMBEDDED")
        .env_remove("RUSTSTREAM_METRICS_ADDR")
        .env_remove("RUSTSTREAM_LOG_FORMAT")
        .env_remove("RUSTSTREAM_DRAIN_TIMEOUT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// The program's lines of `text`: the harness's own (`running 1 test`, `test result`) are not.
pub fn program_lines(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("running 1 test") && !l.starts_with("test result"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `command`: its output, and its stdout and stderr without the harness's lines.
pub fn run(command: &mut Command) -> (Output, String, String) {
    let output = command.output().expect("the program runs");
    let stdout = program_lines(&String::from_utf8_lossy(&output.stdout));
    let stderr = program_lines(&String::from_utf8_lossy(&output.stderr));
    (output, stdout, stderr)
}

/// The lines a running child writes to standard output, read as they come.
pub struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Lines {
    /// Reads `child`'s standard output (piped) from now on.
    pub fn of(child: &mut std::process::Child) -> Self {
        use std::io::BufRead as _;
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            rx,
            seen: Vec::new(),
        }
    }

    /// Starts `command` with its standard output piped here (standard error inherited): the
    /// child and its lines.
    pub fn spawn(command: &mut Command) -> (std::process::Child, Self) {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the program starts");
        let lines = Self::of(&mut child);
        (child, lines)
    }

    /// The first line (read before or within 30 s) that satisfies `matches`.
    pub fn wait_for(&mut self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(line) = self.seen.iter().find(|l| matches(l)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {what}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }
}

/// Polls `check` (from a test's own thread) until it finds something, for at most 30 s.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends SIGTERM to `child`, as an orchestrator stops a service.
pub fn terminate(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Makes this test crate the program of an example: a module `$module` with the example's code
/// (`include!` of `examples/$file`, unchanged), the test `as_the_app` that runs its `app()` in
/// the child, and `fn $module(args) -> Command` that starts the child.
///
/// ```ignore
/// example_program!(payments, "payments.rs");
/// let (out, stdout, _) = run(&mut payments(["--help"]));
/// ```
#[macro_export]
macro_rules! example_program {
    ($module:ident, $file:literal) => {
        #[allow(dead_code)]
        mod $module {
            include!(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/", $file));

            pub(crate) fn service() -> impl App {
                app()
            }
        }

        /// In the child: the example's program, with the arguments the parent gave.
        #[test]
        fn as_the_app() {
            $crate::support::program::as_the_app(stringify!($module), $module::service);
        }

        /// The example's program with arguments `args`.
        fn $module<const N: usize>(args: [&str; N]) -> ::std::process::Command {
            $crate::support::program::program(args)
        }
    };
}
