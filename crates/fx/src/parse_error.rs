//! [`ParseError`]: where and why graph text could not be read. The lexer makes them and the
//! parser returns them, so the type lives below both.

/// Where and why graph text could not be read; lines and columns count from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}
