//! The tokens of one line of an hba or ident file, as PgBouncer splits them: words, `"quoted"`
//! names (`""` is a quote), commas, and `#` starting a comment.

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A bare word (keywords are recognised only bare).
    Word(String),
    /// A double-quoted name: never a keyword.
    Quoted(String),
    Comma,
    /// The end of the line, or a comment.
    End,
}

/// The tokens of `line`; `Err` for a quote that is not closed.
pub fn tokens(line: &str) -> Result<Vec<Token>, &'static str> {
    let mut out = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            break;
        };
        match c {
            '#' => break,
            ',' => {
                out.push(Token::Comma);
                rest = &rest[1..];
            }
            '"' => {
                let mut name = String::new();
                let mut chars = rest[1..].char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    if c != '"' {
                        name.push(c);
                        continue;
                    }
                    if rest[1 + i + 1..].starts_with('"') {
                        name.push('"');
                        chars.next();
                    } else {
                        end = Some(1 + i + 1);
                        break;
                    }
                }
                let Some(end) = end else {
                    return Err("unterminated quoted name");
                };
                out.push(Token::Quoted(name));
                rest = &rest[end..];
            }
            _ => {
                let end = rest
                    .find(|c: char| c == ',' || c == '#' || c == '"' || c.is_whitespace())
                    .unwrap_or(rest.len());
                out.push(Token::Word(rest[..end].to_string()));
                rest = &rest[end..];
            }
        }
    }
    out.push(Token::End);
    Ok(out)
}

/// A cursor over a line's tokens; past the end it stays at [`Token::End`].
pub struct Cursor {
    tokens: Vec<Token>,
    at: usize,
}

impl Cursor {
    pub fn new(tokens: Vec<Token>) -> Cursor {
        Cursor { tokens, at: 0 }
    }

    pub fn peek(&self) -> &Token {
        self.tokens.get(self.at).unwrap_or(&Token::End)
    }

    pub fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.at < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    pub fn at_end(&self) -> bool {
        *self.peek() == Token::End
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Token {
        Token::Word(s.into())
    }

    #[test]
    fn splits_words_commas_quotes_and_comments() {
        assert_eq!(
            tokens(" host\tdb1,db2 \"a , b\" \"q1\"\"q2\" 10.0.0.0/8 md5 # note").unwrap(),
            vec![
                w("host"),
                w("db1"),
                Token::Comma,
                w("db2"),
                Token::Quoted("a , b".into()),
                Token::Quoted("q1\"q2".into()),
                w("10.0.0.0/8"),
                w("md5"),
                Token::End
            ]
        );
        assert_eq!(tokens(" \t \t ").unwrap(), vec![Token::End]);
        assert_eq!(tokens("#x").unwrap(), vec![Token::End]);
        assert_eq!(tokens("a#b").unwrap(), vec![w("a"), Token::End]);
        assert!(tokens("host \"open").is_err());
        assert_eq!(
            tokens("\"é\"\"\"").unwrap(),
            vec![Token::Quoted("é\"".into()), Token::End]
        );
    }
}
