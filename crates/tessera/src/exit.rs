//! How a command-line program ends: its error and the chain of causes on stderr, and an exit code.

use std::error::Error;
use std::process::ExitCode;

/// The exit code for a program's result: success, or failure after printing `program: error`
/// on stderr, followed by a `  caused by: ...` line for each cause whose text the message does
/// not already contain.
///
/// ```
/// let ok: Result<(), std::io::Error> = Ok(());
/// assert_eq!(tessera::exit_code("demo", ok), std::process::ExitCode::SUCCESS);
/// ```
pub fn exit_code<E: Into<Box<dyn Error>>>(program: &str, result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_report(program, e.into().as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `program: error` and one `  caused by:` line per cause not already spelled out above it.
pub fn error_report(program: &str, error: &dyn Error) -> String {
    let mut report = format!("{program}: {error}");
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !report.contains(&text) {
            report.push_str(&format!("\n  caused by: {text}"));
        }
        cause = e.source();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::error_report;
    use std::fmt;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("loading weights")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_report_lists_causes_the_message_does_not_repeat() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(
            error_report("bench", &e),
            "bench: loading weights\n  caused by: disk full"
        );
        let e = std::io::Error::other("disk full");
        assert_eq!(error_report("bench", &e), "bench: disk full");
    }
}
