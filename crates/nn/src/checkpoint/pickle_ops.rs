//! The pickle opcodes this module reads or writes, by their names in CPython's
//! `pickle.py`.

pub const PROTO: u8 = 0x80;
pub const FRAME: u8 = 0x95;
pub const STOP: u8 = b'.';

pub const GLOBAL: u8 = b'c';
pub const STACK_GLOBAL: u8 = 0x93;
pub const BINPERSID: u8 = b'Q';
pub const REDUCE: u8 = b'R';
pub const BUILD: u8 = b'b';

pub const MARK: u8 = b'(';
pub const POP: u8 = b'0';
pub const POP_MARK: u8 = b'1';
pub const DUP: u8 = b'2';

pub const EMPTY_TUPLE: u8 = b')';
pub const TUPLE: u8 = b't';
pub const TUPLE1: u8 = 0x85;
pub const TUPLE2: u8 = 0x86;
pub const TUPLE3: u8 = 0x87;
pub const EMPTY_LIST: u8 = b']';
pub const LIST: u8 = b'l';
pub const APPEND: u8 = b'a';
pub const APPENDS: u8 = b'e';
pub const EMPTY_DICT: u8 = b'}';
pub const DICT: u8 = b'd';
pub const SETITEM: u8 = b's';
pub const SETITEMS: u8 = b'u';

pub const NONE: u8 = b'N';
pub const NEWTRUE: u8 = 0x88;
pub const NEWFALSE: u8 = 0x89;
pub const BININT: u8 = b'J';
pub const BININT1: u8 = b'K';
pub const BININT2: u8 = b'M';
pub const LONG1: u8 = 0x8a;
pub const LONG4: u8 = 0x8b;
pub const BINFLOAT: u8 = b'G';
pub const BINUNICODE: u8 = b'X';
pub const SHORT_BINUNICODE: u8 = 0x8c;
pub const BINUNICODE8: u8 = 0x8d;

pub const BINPUT: u8 = b'q';
pub const LONG_BINPUT: u8 = b'r';
pub const MEMOIZE: u8 = 0x94;
pub const BINGET: u8 = b'h';
pub const LONG_BINGET: u8 = b'j';
