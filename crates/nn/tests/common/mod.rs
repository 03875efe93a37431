//! The workspace's shared test helpers (`tessera-testkit`), under the name the tests use.
#![allow(unused_imports)]

pub use tessera_testkit::*;

mod gradcheck;
mod holders;
pub use gradcheck::*;
pub use holders::*;
