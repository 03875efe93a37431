//! The workspace's shared test helpers (`tessera-testkit`), under the name the tests use.
#![allow(unused_imports)]

pub use tessera_testkit::*;

mod holders;
pub use holders::*;
