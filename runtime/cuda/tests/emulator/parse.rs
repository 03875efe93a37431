//! Parses PTX module text (the subset the renderer emits) into a [`Module`]: header directives,
//! entries with parameters, register and shared declarations, labels and instructions.

use std::collections::HashMap;

use super::decode::{decode, operand_count};
use super::error::{EmuError, Result};
use super::lexer::{Spanned, Token, tokenize};
use super::program::{
    AddressBase, Entry, Guard, Instr, Module, Op, Operand, Param, RegId, Register, SharedArray,
    Special, Ty,
};

impl Module {
    /// Parses a PTX module; errors name the line.
    pub fn parse(text: &str) -> Result<Module> {
        let tokens = tokenize(text)?;
        Parser { tokens, pos: 0 }.module()
    }

    pub fn entry(&self, name: &str) -> Result<&Entry> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| EmuError::NoSuchEntry(name.to_string()))
    }
}

struct Parser {
    tokens: Vec<Spanned>,
    pos: usize,
}

/// Per-entry name tables filled while its body is parsed.
#[derive(Default)]
struct Scope {
    registers: HashMap<String, RegId>,
}

impl Parser {
    fn line(&self) -> usize {
        self.tokens
            .get(self.pos)
            .or(self.tokens.last())
            .map_or(1, |t| t.line)
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T> {
        Err(EmuError::Syntax {
            line: self.line(),
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos).map(|t| &t.token)
    }

    fn peek_is(&self, c: char) -> bool {
        self.peek() == Some(&Token::Punct(c))
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek_is(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            let found = self.describe_next();
            self.error(format!("expected `{c}`, found {found}"))
        }
    }

    fn describe_next(&self) -> String {
        match self.peek() {
            Some(Token::Word(w)) => format!("`{w}`"),
            Some(Token::Punct(c)) => format!("`{c}`"),
            None => "the end of the text".to_string(),
        }
    }

    fn word(&mut self) -> Result<String> {
        match self.peek() {
            Some(Token::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => {
                let found = self.describe_next();
                self.error(format!("expected a word, found {found}"))
            }
        }
    }

    fn expect_word(&mut self, expected: &str) -> Result<()> {
        let line = self.line();
        let w = self.word()?;
        if w == expected {
            Ok(())
        } else {
            Err(EmuError::Syntax {
                line,
                message: format!("expected `{expected}`, found `{w}`"),
            })
        }
    }

    fn number(&mut self) -> Result<u64> {
        let line = self.line();
        let w = self.word()?;
        match parse_literal(&w) {
            Some(Operand::Int(v)) if v >= 0 => Ok(v as u64),
            _ => Err(EmuError::Syntax {
                line,
                message: format!("expected a non-negative integer, found `{w}`"),
            }),
        }
    }

    fn module(mut self) -> Result<Module> {
        let mut module = Module::default();
        let mut module_shared = Vec::new();
        while let Some(token) = self.peek().cloned() {
            let line = self.line();
            match token {
                Token::Word(w) if w == ".version" => {
                    self.pos += 1;
                    module.version = self.word()?;
                }
                Token::Word(w) if w == ".target" => {
                    self.pos += 1;
                    module.target = self.word()?;
                    while self.eat(',') {
                        self.word()?;
                    }
                }
                Token::Word(w) if w == ".address_size" => {
                    self.pos += 1;
                    if self.number()? != 64 {
                        return self.error("only .address_size 64 is supported");
                    }
                }
                Token::Word(w) if w == ".shared" => {
                    self.pos += 1;
                    module_shared.push(self.shared_decl()?);
                }
                Token::Word(w) if w == ".visible" || w == ".entry" => {
                    self.pos += 1;
                    if w == ".visible" {
                        self.expect_word(".entry")?;
                    }
                    let entry = self.entry(&module_shared)?;
                    module.entries.push(entry);
                }
                Token::Word(w) => {
                    return Err(EmuError::Syntax {
                        line,
                        message: format!("unexpected `{w}` at module level"),
                    });
                }
                Token::Punct(c) => {
                    return Err(EmuError::Syntax {
                        line,
                        message: format!("unexpected `{c}` at module level"),
                    });
                }
            }
        }
        if module.entries.is_empty() {
            return self.error("the module has no .entry");
        }
        Ok(module)
    }

    /// `[.align N] .b8 NAME[BYTES];` after `.shared`: (name, align, bytes).
    fn shared_decl(&mut self) -> Result<(String, u64, u64)> {
        let mut align = 1;
        if self.peek() == Some(&Token::Word(".align".into())) {
            self.pos += 1;
            align = self.number()?;
            if !align.is_power_of_two() {
                return self.error(format!("alignment {align} is not a power of two"));
            }
        }
        self.expect_word(".b8")?;
        let name = self.word()?;
        self.expect('[')?;
        let bytes = self.number()?;
        self.expect(']')?;
        self.expect(';')?;
        Ok((name, align, bytes))
    }

    fn entry(&mut self, module_shared: &[(String, u64, u64)]) -> Result<Entry> {
        let mut entry = Entry {
            name: self.word()?,
            ..Entry::default()
        };
        for (name, align, bytes) in module_shared {
            add_shared(&mut entry, name, *align, *bytes);
        }
        self.expect('(')?;
        if !self.eat(')') {
            loop {
                self.expect_word(".param")?;
                let line = self.line();
                let ty = self.word()?;
                let ty = ty
                    .strip_prefix('.')
                    .and_then(Ty::from_suffix)
                    .filter(|t| *t != Ty::Pred)
                    .ok_or_else(|| EmuError::Syntax {
                        line,
                        message: format!("bad parameter type `{ty}`"),
                    })?;
                entry.params.push(Param {
                    name: self.word()?,
                    ty,
                });
                if self.eat(')') {
                    break;
                }
                self.expect(',')?;
            }
        }
        self.expect('{')?;
        let mut scope = Scope::default();
        let mut pending_branches = Vec::new();
        let mut depth = 1;
        while depth > 0 {
            let line = self.line();
            match self.peek().cloned() {
                None => return self.error(format!("entry `{}` is not closed by `}}`", entry.name)),
                Some(Token::Punct('{')) => {
                    self.pos += 1;
                    depth += 1;
                }
                Some(Token::Punct('}')) => {
                    self.pos += 1;
                    depth -= 1;
                }
                Some(Token::Word(w)) if w == ".reg" => {
                    self.pos += 1;
                    self.reg_decl(&mut entry, &mut scope)?;
                }
                Some(Token::Word(w)) if w == ".shared" => {
                    self.pos += 1;
                    let (name, align, bytes) = self.shared_decl()?;
                    add_shared(&mut entry, &name, align, bytes);
                }
                Some(Token::Word(w))
                    if self.tokens.get(self.pos + 1).map(|t| &t.token)
                        == Some(&Token::Punct(':')) =>
                {
                    self.pos += 2;
                    if entry.labels.insert(w.clone(), entry.instrs.len()).is_some() {
                        return Err(EmuError::Syntax {
                            line,
                            message: format!("label `{w}` defined twice"),
                        });
                    }
                }
                Some(_) => {
                    let instr = self.instruction(&scope)?;
                    if instr.op == Op::Bra {
                        pending_branches.push(entry.instrs.len());
                    }
                    entry.instrs.push(instr);
                }
            }
        }
        for index in pending_branches {
            let instr = &mut entry.instrs[index];
            let Operand::Symbol(label) = &instr.operands[0] else {
                return Err(EmuError::Syntax {
                    line: instr.line,
                    message: "a branch target must be a label".into(),
                });
            };
            let target = *entry.labels.get(label).ok_or_else(|| EmuError::Syntax {
                line: instr.line,
                message: format!("undefined label `{label}`"),
            })?;
            instr.target = Some(target);
        }
        Ok(entry)
    }

    /// `.TYPE %name<N>, %other;` after `.reg`.
    fn reg_decl(&mut self, entry: &mut Entry, scope: &mut Scope) -> Result<()> {
        let line = self.line();
        let ty = self.word()?;
        let ty = ty
            .strip_prefix('.')
            .and_then(Ty::from_suffix)
            .ok_or_else(|| EmuError::Syntax {
                line,
                message: format!("bad register type `{ty}`"),
            })?;
        loop {
            let name = self.word()?;
            if !name.starts_with('%') {
                return self.error(format!("register name `{name}` must start with %"));
            }
            let names: Vec<String> = if self.eat('<') {
                let count = self.number()?;
                self.expect('>')?;
                (0..count).map(|i| format!("{name}{i}")).collect()
            } else {
                vec![name]
            };
            for name in names {
                let id = RegId(entry.registers.len() as u32);
                if scope.registers.insert(name.clone(), id).is_some() {
                    return Err(EmuError::Syntax {
                        line,
                        message: format!("register {name} declared twice"),
                    });
                }
                entry.registers.push(Register { name, ty });
            }
            if self.eat(';') {
                return Ok(());
            }
            self.expect(',')?;
        }
    }

    fn instruction(&mut self, scope: &Scope) -> Result<Instr> {
        let line = self.line();
        let mut guard = None;
        if self.eat('@') {
            let negated = self.eat('!');
            let name = self.word()?;
            let reg = *scope.registers.get(&name).ok_or_else(|| EmuError::Syntax {
                line,
                message: format!("undeclared guard register {name}"),
            })?;
            guard = Some(Guard { reg, negated });
        }
        let opcode = self.word()?;
        let op = decode(&opcode, line)?;
        let mut operands = Vec::new();
        if !self.eat(';') {
            loop {
                operands.push(self.operand(scope)?);
                if self.eat(';') {
                    break;
                }
                self.expect(',')?;
            }
        }
        let expected = operand_count(&op);
        if operands.len() != expected {
            return Err(EmuError::Syntax {
                line,
                message: format!(
                    "`{opcode}` takes {expected} operands, found {}",
                    operands.len()
                ),
            });
        }
        Ok(Instr {
            line,
            guard,
            op,
            operands,
            target: None,
        })
    }

    fn register(&mut self, scope: &Scope) -> Result<RegId> {
        let line = self.line();
        let name = self.word()?;
        scope
            .registers
            .get(&name)
            .copied()
            .ok_or_else(|| EmuError::Syntax {
                line,
                message: format!("undeclared register {name}"),
            })
    }

    fn operand(&mut self, scope: &Scope) -> Result<Operand> {
        let line = self.line();
        if self.eat('[') {
            let base = self.word()?;
            let base = if base.starts_with('%') {
                AddressBase::Reg(*scope.registers.get(&base).ok_or_else(|| EmuError::Syntax {
                    line,
                    message: format!("undeclared register {base}"),
                })?)
            } else {
                AddressBase::Symbol(base)
            };
            let mut offset = 0;
            if self.peek_is('+') || self.peek_is('-') {
                let mut negative = self.eat('-');
                if !negative {
                    self.expect('+')?;
                    negative = self.eat('-');
                }
                let magnitude = self.number()? as i64;
                offset = if negative { -magnitude } else { magnitude };
            }
            self.expect(']')?;
            return Ok(Operand::Address { base, offset });
        }
        if self.eat('{') {
            let mut regs = vec![self.register(scope)?];
            while self.eat(',') {
                regs.push(self.register(scope)?);
            }
            self.expect('}')?;
            return Ok(Operand::Vector(regs));
        }
        let negative = self.eat('-');
        let word = self.word()?;
        if negative || word.starts_with(|c: char| c.is_ascii_digit()) {
            let literal = parse_literal(&word).ok_or_else(|| EmuError::Syntax {
                line,
                message: format!("bad literal `{word}`"),
            })?;
            return match (negative, literal) {
                (false, literal) => Ok(literal),
                (true, Operand::Int(v)) => Ok(Operand::Int(v.wrapping_neg())),
                (true, Operand::F64Bits(b)) => Ok(Operand::F64Bits(b ^ (1 << 63))),
                (true, Operand::F32Bits(b)) => Ok(Operand::F32Bits(b ^ (1 << 31))),
                (true, _) => Err(EmuError::Syntax {
                    line,
                    message: format!("bad literal `-{word}`"),
                }),
            };
        }
        if let Some(special) = special_register(&word) {
            return Ok(Operand::Special(special));
        }
        if word.starts_with('%') {
            return match scope.registers.get(&word) {
                Some(id) => Ok(Operand::Reg(*id)),
                None if word.starts_with("%tid")
                    || word.starts_with("%ctaid")
                    || word.starts_with("%ntid")
                    || word.starts_with("%nctaid") =>
                {
                    Err(EmuError::Syntax {
                        line,
                        message: format!(
                            "special register {word} is outside the subset (x dimension only)"
                        ),
                    })
                }
                None => Err(EmuError::Syntax {
                    line,
                    message: format!("undeclared register {word}"),
                }),
            };
        }
        Ok(Operand::Symbol(word))
    }
}

fn add_shared(entry: &mut Entry, name: &str, align: u64, bytes: u64) {
    let offset = entry.shared_bytes.div_ceil(align) * align;
    entry.shared.push(SharedArray {
        name: name.to_string(),
        offset,
        bytes,
    });
    entry.shared_bytes = offset + bytes;
}

fn special_register(word: &str) -> Option<Special> {
    Some(match word {
        "%tid.x" => Special::TidX,
        "%ntid.x" => Special::NtidX,
        "%ctaid.x" => Special::CtaidX,
        "%nctaid.x" => Special::NctaidX,
        _ => return None,
    })
}

/// A PTX literal: `0f` + 8 hex digits (f32 bits), `0d` + 16 hex digits (f64 bits), hex `0x`,
/// octal `0NNN`, decimal integers (an optional `U` suffix), and decimal floats.
fn parse_literal(word: &str) -> Option<Operand> {
    let lower = word.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0f") {
        return (hex.len() == 8)
            .then(|| u32::from_str_radix(hex, 16).ok().map(Operand::F32Bits))?;
    }
    if let Some(hex) = lower.strip_prefix("0d") {
        return (hex.len() == 16)
            .then(|| u64::from_str_radix(hex, 16).ok().map(Operand::F64Bits))?;
    }
    let digits = lower.strip_suffix('u').unwrap_or(&lower);
    if let Some(hex) = digits.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16)
            .ok()
            .map(|v| Operand::Int(v as i64));
    }
    if digits.contains(['.', 'e']) {
        return digits
            .parse::<f64>()
            .ok()
            .map(|v| Operand::F64Bits(v.to_bits()));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return u64::from_str_radix(&digits[1..], 8)
            .ok()
            .map(|v| Operand::Int(v as i64));
    }
    digits.parse::<u64>().ok().map(|v| Operand::Int(v as i64))
}
