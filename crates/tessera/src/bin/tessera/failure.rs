//! How a subcommand fails: a one-line message with its causes, and the exit code (2 for a
//! file or argument that cannot be used, as clap uses for bad arguments; 1 for a failure
//! while working).

use std::error::Error;

pub struct Failure {
    context: String,
    source: Option<Box<dyn Error>>,
    bad_input: bool,
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;

impl Failure {
    /// A file or argument the command cannot use.
    pub fn input(context: impl Into<String>, source: impl Into<Box<dyn Error>>) -> Failure {
        Failure {
            context: context.into(),
            source: Some(source.into()),
            bad_input: true,
        }
    }

    /// A file or argument the command cannot use, said in a sentence.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            context: message.into(),
            source: None,
            bad_input: true,
        }
    }

    /// Work that failed on good input.
    pub fn failed(context: impl Into<String>, source: impl Into<Box<dyn Error>>) -> Failure {
        Failure {
            context: context.into(),
            source: Some(source.into()),
            bad_input: false,
        }
    }

    pub fn exit_code(&self) -> u8 {
        if self.bad_input { 2 } else { 1 }
    }

    /// `tessera: context: error` and its causes, on one line.
    pub fn report(&self) -> String {
        let Some(source) = &self.source else {
            return format!("tessera: {}", self.context);
        };
        let chain = tessera::error_report(&self.context, source.as_ref()).replace("\n  ", "; ");
        format!("tessera: {chain}")
    }
}
