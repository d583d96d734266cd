//! `session::lex` against PostgreSQL's own scanner (libpg_query): for a text PostgreSQL
//! parses, the lexer's identifiers, literals and punctuation lie where PostgreSQL's scanner
//! puts them and each identifier's catalog name is PostgreSQL's (`pgcorral::fuzzing::
//! session_lex_oracle`). Any other text only must not panic the lexer, which the oracle runs
//! on every text before asking PostgreSQL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::fuzzing::session_lex_oracle;

fuzz_target!(|data: &[u8]| {
    // Longer texts add little and parse slowly.
    if data.len() > 2048 {
        return;
    }
    if let Err(e) = session_lex_oracle(data) {
        panic!("{e}");
    }
});
