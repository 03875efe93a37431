//! Splits PTX text into tokens with their line numbers; comments (`//` and `/* */`) vanish.

use super::error::{EmuError, Result};

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// Opcodes, directives, registers, names and numbers: `ld.global.f32`, `.reg`, `%tid.x`,
    /// `$L1`, `0f3F800000`, `42`, `1.5`.
    Word(String),
    Punct(char),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spanned {
    pub token: Token,
    pub line: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '%' | '_' | '$')
}

pub fn tokenize(text: &str) -> Result<Vec<Spanned>> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let start = line;
            i += 2;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(EmuError::Syntax {
                            line: start,
                            message: "unterminated /* comment".into(),
                        });
                    }
                    Some('*') if chars.get(i + 1) == Some(&'/') => {
                        i += 2;
                        break;
                    }
                    Some('\n') => line += 1,
                    Some(_) => {}
                }
                i += 1;
            }
        } else if is_word_char(c) {
            let start = i;
            let decimal = c.is_ascii_digit()
                && !matches!(chars.get(i + 1), Some('x' | 'X' | 'f' | 'F' | 'd' | 'D'));
            while i < chars.len() {
                let exponent_sign =
                    decimal && matches!(chars[i], '+' | '-') && matches!(chars[i - 1], 'e' | 'E');
                if !(is_word_char(chars[i]) || exponent_sign) {
                    break;
                }
                i += 1;
            }
            tokens.push(Spanned {
                token: Token::Word(chars[start..i].iter().collect()),
                line,
            });
        } else if ",;:[]{}()+-@!<>|".contains(c) {
            tokens.push(Spanned {
                token: Token::Punct(c),
                line,
            });
            i += 1;
        } else {
            return Err(EmuError::Syntax {
                line,
                message: format!("unexpected character `{c}`"),
            });
        }
    }
    Ok(tokens)
}
