//! Reading an hba file's lines (a backslash at the end goes on on the next line) with
//! PostgreSQL 16's `include`, `include_if_exists` and `include_dir` directives (relative to the
//! including file's directory; a directory's `.conf` files in name order), collecting rules,
//! warnings and the lines that refuse the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ident::Ident;
use super::parse;
use super::token::{tokens, Cursor, Token};
use super::Rule;

/// Includes nested this deep are taken for a loop (PostgreSQL's `CONF_FILE_MAX_DEPTH`).
pub const MAX_DEPTH: usize = 10;

/// Where included files and `@file` lists come from.
pub trait Files {
    fn read(&mut self, path: &Path) -> std::io::Result<String>;
    /// The entries of a directory (any order).
    fn list(&mut self, dir: &Path) -> std::io::Result<Vec<PathBuf>>;
}

/// The file system.
pub struct Disk;

impl Files for Disk {
    fn read(&mut self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn list(&mut self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect()
    }
}

/// Files read by a function; it has no directories.
impl<F: FnMut(&Path) -> std::io::Result<String>> Files for F {
    fn read(&mut self, path: &Path) -> std::io::Result<String> {
        self(path)
    }

    fn list(&mut self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            dir.display().to_string(),
        ))
    }
}

/// `name` relative to the directory of `file` (unless absolute).
pub fn relative(file: &Path, name: &str) -> PathBuf {
    match Path::new(name).is_absolute() {
        true => PathBuf::from(name),
        false => file.parent().unwrap_or(Path::new("")).join(name),
    }
}

/// What reading the file and its includes gave.
pub struct Read<'a> {
    ident: &'a Ident,
    files: &'a mut dyn Files,
    pub rules: Vec<Rule>,
    pub warnings: Vec<String>,
    /// Lines that cannot be used, `file:line: why`: the file is refused.
    pub errors: Vec<String>,
}

impl<'a> Read<'a> {
    pub fn new(ident: &'a Ident, files: &'a mut dyn Files) -> Read<'a> {
        Read {
            ident,
            files,
            rules: Vec::new(),
            warnings: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The lines of `text`, read from `file` at include depth `depth`.
    pub fn text(&mut self, file: &Path, text: &str, depth: usize) {
        let name: Arc<str> = Arc::from(file.display().to_string());
        let mut lines = text.lines().enumerate();
        while let Some((n, first)) = lines.next() {
            let number = n + 1;
            // A line ending in a backslash goes on on the next, as in PostgreSQL.
            let mut joined = first.to_string();
            while joined.ends_with('\\') {
                joined.pop();
                match lines.next() {
                    Some((_, more)) => joined.push_str(more),
                    None => break,
                }
            }
            let line = joined.as_str();
            let at = format!("{name}:{number}");
            if let Some(directive) = self.directive(file, line, &at, depth) {
                if let Err(why) = directive {
                    self.errors.push(format!("{at}: {why}"));
                }
                continue;
            }
            let mut warn = Vec::new();
            match parse::rule(line, file, self.ident, &mut *self.files, &mut warn) {
                Ok(Some(mut rule)) => {
                    rule.file = name.clone();
                    rule.line = number;
                    self.rules.push(rule);
                }
                Ok(None) => {}
                Err(why) => self.errors.push(format!("{at}: {why}")),
            }
            self.warnings
                .extend(warn.into_iter().map(|w| format!("{at}: {w}")));
        }
    }

    /// An include directive: `None` when the line is not one.
    fn directive(
        &mut self,
        file: &Path,
        line: &str,
        at: &str,
        depth: usize,
    ) -> Option<Result<(), String>> {
        let mut t = Cursor::new(tokens(line).ok()?);
        let Token::Word(w) = t.next() else {
            return None;
        };
        if !matches!(w.as_str(), "include" | "include_if_exists" | "include_dir") {
            return None;
        }
        let target = match t.next() {
            Token::Word(p) | Token::Quoted(p) => p,
            _ => return Some(Err(format!("missing file name after \"{w}\""))),
        };
        if !t.at_end() {
            return Some(Err(format!("extra text after \"{w} {target}\"")));
        }
        if depth + 1 >= MAX_DEPTH {
            return Some(Err(format!(
                "could not open file \"{target}\": maximum nesting depth exceeded"
            )));
        }
        let path = relative(file, &target);
        Some(match w.as_str() {
            "include_dir" => self.dir(&path, depth),
            kind => match self.files.read(&path) {
                Ok(text) => {
                    self.text(&path, &text, depth + 1);
                    Ok(())
                }
                Err(e) if kind == "include_if_exists" => {
                    self.warnings.push(format!(
                        "{at}: skipping missing authentication file \"{}\": {e}",
                        path.display()
                    ));
                    Ok(())
                }
                Err(e) => Err(format!("could not open file \"{}\": {e}", path.display())),
            },
        })
    }

    /// `include_dir`: the directory's files ending in `.conf`, not hidden, in name order.
    fn dir(&mut self, dir: &Path, depth: usize) -> Result<(), String> {
        let mut entries: Vec<PathBuf> = self
            .files
            .list(dir)
            .map_err(|e| format!("could not open directory \"{}\": {e}", dir.display()))?
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('.') && n.ends_with(".conf"))
            })
            .collect();
        entries.sort();
        for path in entries {
            let text = self
                .files
                .read(&path)
                .map_err(|e| format!("could not open file \"{}\": {e}", path.display()))?;
            self.text(&path, &text, depth + 1);
        }
        Ok(())
    }
}
