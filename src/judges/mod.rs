//! The judges: what decides on a change once a session has left it, in
//! code — the tamper policy of the hook and the diff gate ([`tamper`],
//! with the runner's part of shared files, [`runner`], and `append_only`,
//! [`append_only`]), the size gate ([`size`]), the drift gate after the
//! goal test ([`drift`]), the test count ([`testcount`]), the pre-critic on the added lines
//! ([`precheck`], reading [`syntax`] and syntax [`tree`]s), the autofix's
//! risk policy ([`risk`]) and what they all say ([`finding`]). The gates of
//! an attempt that run them are `crate::job`'s table; the live guards of a
//! session are [`crate::guard`].

pub mod append_only;
pub mod drift;
pub mod finding;
pub mod precheck;
pub mod risk;
pub mod runner;
pub mod size;
/// The lexical splitter, each language's own ([`crate::lang::syntax`]).
pub use crate::lang::syntax;
pub mod tamper;
pub mod testcount;
pub mod tree;
