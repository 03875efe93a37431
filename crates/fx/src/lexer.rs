//! A character cursor over one line of graph text, tracking line and column for parse errors.

use crate::parse_error::ParseError;

/// Reads one line left to right; columns are 1-based and count characters.
pub(crate) struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(text: &'a str, line: usize) -> Self {
        Lexer { text, pos: 0, line }
    }

    /// What is left to read.
    pub fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub fn at_end(&self) -> bool {
        self.pos == self.text.len()
    }

    pub fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// An error at the current position.
    pub fn error(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.pos, message)
    }

    /// An error at byte offset `pos` of this line.
    pub fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            column: self.text[..pos].chars().count() + 1,
            message: message.into(),
        }
    }

    /// Skips `bytes` bytes (which end on a character boundary).
    pub fn advance(&mut self, bytes: usize) {
        self.pos = (self.pos + bytes).min(self.text.len());
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn skip_spaces(&mut self) {
        while self.peek().is_some_and(|c| c == ' ' || c == '\t') {
            self.pos += 1;
        }
    }

    /// Consumes `token` (after spaces) if it comes next.
    pub fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// Consumes `token` (after spaces) or fails saying what was expected.
    pub fn expect(&mut self, token: &str) -> Result<(), ParseError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{token}`, found {}", self.found())))
        }
    }

    /// A short description of what comes next, for errors.
    pub fn found(&self) -> String {
        match self.rest().chars().take(12).collect::<String>() {
            s if s.is_empty() => "end of line".into(),
            s => format!("`{s}`"),
        }
    }

    /// Reads the longest run (after spaces) of characters that `keep` accepts.
    pub fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        self.skip_spaces();
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.bump();
        }
        &self.text[start..self.pos]
    }

    /// An identifier (`conv1`, `_x`).
    pub fn ident(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_spaces();
        let start = self.pos;
        let word = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
        if word.is_empty() || word.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.error_at(start, format!("expected {what}, found {}", self.found())));
        }
        Ok(word)
    }

    /// A dotted path (`layer1.0.conv`).
    pub fn path(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_spaces();
        let start = self.pos;
        let word = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if word.is_empty() {
            return Err(self.error_at(start, format!("expected {what}, found {}", self.found())));
        }
        Ok(word)
    }

    /// An unsigned integer.
    pub fn usize(&mut self, what: &str) -> Result<usize, ParseError> {
        self.skip_spaces();
        let start = self.pos;
        let digits = self.take_while(|c| c.is_ascii_digit());
        digits
            .parse()
            .map_err(|_| self.error_at(start, format!("expected {what}, found {}", self.found())))
    }

    /// The text up to the `]` that closes an already opened `[`, balancing brackets and
    /// skipping quoted strings.
    pub fn balanced_until_bracket(&mut self) -> Result<&'a str, ParseError> {
        let start = self.pos;
        let len = balanced_len(self.rest())
            .ok_or_else(|| self.error("unbalanced brackets or quotes before `]`"))?;
        self.pos += len;
        Ok(&self.text[start..self.pos])
    }
}

/// The length of the longest prefix of `text` that stops before an unmatched `]` (or at the
/// end), with `()`, `[]`, `{}` balanced and quotes closed; `None` if they are not.
pub(crate) fn balanced_len(text: &str) -> Option<usize> {
    let mut stack = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\n' | '\r' => return None,
            '\'' | '"' => quote = Some(c),
            '(' => stack.push(')'),
            '[' => stack.push(']'),
            '{' => stack.push('}'),
            ']' if stack.is_empty() => return Some(i),
            ')' | ']' | '}' if stack.pop() != Some(c) => return None,
            _ => {}
        }
    }
    (quote.is_none() && stack.is_empty()).then_some(text.len())
}
