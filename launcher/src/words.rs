//! Splitting a command given as one string (`--ssh-args`, `MPIRT_SSH`, ...) into words the way
//! a POSIX shell does, so that `-o "ProxyCommand ssh gw -W %h:%p"` is two words, not five.
//!
//! Quoting only: single quotes keep everything literally, double quotes keep everything but a
//! backslash before `"`, `\`, `$`, `` ` `` or a newline, and an unquoted backslash keeps the next
//! character. Nothing is expanded (`$HOME` stays as written): the string goes to a program, not a
//! shell, and expanding a subset would surprise more than expanding nothing.

/// The words of `text`; an unclosed quote or a trailing backslash is an error saying so.
pub fn split(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    // The word being built; None between words, so that `''` still makes an (empty) word.
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(format!("unclosed single quote in '{text}'")),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err(format!("unclosed double quote in '{text}'")),
                        },
                        Some(c) => w.push(c),
                        None => return Err(format!("unclosed double quote in '{text}'")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err(format!("'{text}' ends with a lone backslash")),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn quotes_group_words_as_a_shell_does() {
        assert_eq!(
            split(r#"-o "ProxyCommand ssh gw -W %h:%p" -F  /x/cfg"#).unwrap(),
            ["-o", "ProxyCommand ssh gw -W %h:%p", "-F", "/x/cfg"]
        );
        assert_eq!(split("  a\tb\nc ").unwrap(), ["a", "b", "c"]);
        assert_eq!(split("'it''s' x''y ''").unwrap(), ["its", "xy", ""]);
        assert_eq!(
            split(r#""a \"b\" \$c \d" \ e\\"#).unwrap(),
            [r#"a "b" $c \d"#, " e\\"]
        );
        assert_eq!(split("'$HOME' \"$HOME\"").unwrap(), ["$HOME", "$HOME"]);
        assert!(split("").unwrap().is_empty());
    }

    #[test]
    fn unclosed_quotes_are_errors() {
        for bad in ["-o 'x", "\"a", "\"a\\", "end\\"] {
            let e = split(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    /// sh reads the same words from the same text (where the text has no expansions).
    #[test]
    fn agrees_with_sh() {
        let text = r#"-o "ProxyCommand ssh gw -W %h:%p" 'a b'"c d" e\ f "g\\h" ''"#;
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {text}"))
            .output()
            .unwrap();
        let mut from_sh: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .map(String::from)
            .collect();
        from_sh.pop();
        assert_eq!(split(text).unwrap(), from_sh);
    }
}
