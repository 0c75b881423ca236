//! `#[derive(Equivalence)]` for mpirt, parsing the struct by hand (no syn or quote).
//!
//! Accepted: a struct with named fields, a tuple struct or a unit struct, without generics,
//! `#[repr(C)]` or not, as rsmpi's derive takes them (fields may be tuples and arrays: both are
//! `Equivalence` types here, laid out the same way). The generated
//! code checks at compile time that every field is `Equivalence` and that the struct needs no
//! drop, and builds the datatype from the fields' offsets (`offset_of!`) in declaration order,
//! once per type: padding between fields is not part of it, so it is never read or sent, and
//! every rank of the same program agrees on the layout.

mod crate_name;

use proc_macro::{Delimiter, TokenStream, TokenTree};

#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    match parse(input) {
        Ok(item) => generate(&item),
        Err(message) => compile_error(&message),
    }
}

struct Field {
    name: String,
    ty: String,
}

struct Item {
    name: String,
    fields: Vec<Field>,
}

fn compile_error(message: &str) -> TokenStream {
    format!("::core::compile_error!({message:?});")
        .parse()
        .expect("a compile_error! invocation parses")
}

fn parse(input: TokenStream) -> Result<Item, String> {
    let mut tokens = input.into_iter().peekable();
    let name = loop {
        match tokens.next() {
            // Attributes (#[repr(C)] among them) do not change what is generated: the
            // layout comes from the fields' offsets.
            Some(TokenTree::Punct(p)) if p.as_char() == '#' => {
                tokens.next();
            }
            Some(TokenTree::Ident(i)) if i.to_string() == "struct" => match tokens.next() {
                Some(TokenTree::Ident(name)) => break name.to_string(),
                _ => return Err("derive(Equivalence): expected the struct's name".into()),
            },
            Some(TokenTree::Ident(i)) if i.to_string() == "enum" || i.to_string() == "union" => {
                return Err(format!(
                    "derive(Equivalence) supports structs only, not {i}s: an {i}'s bytes may \
                     include padding or invalid values"
                ))
            }
            // Visibility: `pub`, `pub(crate)`.
            Some(_) => {}
            None => return Err("derive(Equivalence): expected a struct".into()),
        }
    };
    let body = match tokens.next() {
        Some(TokenTree::Punct(p)) if p.as_char() == '<' => {
            return Err(format!(
                "derive(Equivalence) does not support generic structs ({name}); implement \
                 Equivalence by hand"
            ))
        }
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => parse_fields(g.stream())?,
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
            parse_tuple_fields(g.stream())
        }
        // A unit struct: no bytes to send, as rsmpi's derive makes it.
        Some(TokenTree::Punct(p)) if p.as_char() == ';' => Vec::new(),
        _ => {
            return Err(format!(
                "derive(Equivalence): cannot read the body of struct {name}"
            ))
        }
    };
    Ok(Item { fields: body, name })
}

/// Splits a tuple struct's `pub T, (U, V), [W; N]` into fields named `0`, `1`, ...
fn parse_tuple_fields(body: TokenStream) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut tokens = body.into_iter().peekable();
    while tokens.peek().is_some() {
        let mut ty = TokenStream::new();
        let mut depth = 0i32;
        while let Some(token) = tokens.next() {
            match &token {
                TokenTree::Punct(p) if p.as_char() == ',' && depth == 0 => break,
                // An attribute: `#` and its bracketed group.
                TokenTree::Punct(p) if p.as_char() == '#' && ty.is_empty() => {
                    tokens.next();
                    continue;
                }
                // Visibility, `pub` or `pub(crate)` (a parenthesised group after `pub` is a
                // restriction only when it starts as one, as Rust reads it).
                TokenTree::Ident(i) if i.to_string() == "pub" && ty.is_empty() => {
                    if let Some(TokenTree::Group(g)) = tokens.peek() {
                        let first = g.stream().into_iter().next().map(|t| t.to_string());
                        let restricted =
                            matches!(first.as_deref(), Some("crate" | "self" | "super" | "in"));
                        if g.delimiter() == Delimiter::Parenthesis && restricted {
                            tokens.next();
                        }
                    }
                    continue;
                }
                TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
                TokenTree::Punct(p) if p.as_char() == '>' => depth -= 1,
                _ => {}
            }
            ty.extend([token]);
        }
        fields.push(Field {
            name: fields.len().to_string(),
            ty: ty.to_string(),
        });
    }
    fields
}

/// Splits `a: T, pub b: [U; N], ...` into fields. Commas inside `<...>` belong to the type.
fn parse_fields(body: TokenStream) -> Result<Vec<Field>, String> {
    let mut fields = Vec::new();
    let mut tokens = body.into_iter().peekable();
    while tokens.peek().is_some() {
        let mut name = None;
        // Attributes, visibility and the name, up to the colon.
        loop {
            match tokens.next() {
                Some(TokenTree::Punct(p)) if p.as_char() == '#' => {
                    tokens.next();
                }
                Some(TokenTree::Punct(p)) if p.as_char() == ':' => break,
                Some(TokenTree::Ident(i)) => name = Some(i.to_string()),
                Some(TokenTree::Group(_)) => {}
                _ => return Err("derive(Equivalence): cannot read a field".into()),
            }
        }
        let name = name.ok_or("derive(Equivalence): a field has no name")?;
        let mut ty = TokenStream::new();
        let mut depth = 0i32;
        for token in tokens.by_ref() {
            if let TokenTree::Punct(p) = &token {
                match p.as_char() {
                    ',' if depth == 0 => break,
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
            }
            ty.extend([token]);
        }
        fields.push(Field {
            name,
            ty: ty.to_string(),
        });
    }
    Ok(fields)
}

fn generate(item: &Item) -> TokenStream {
    let name = &item.name;
    // `mpirt`, or `mpi` in a program ported from rsmpi that renamed the dependency.
    let krate = crate_name::mpirt_name();
    let fields: String = item
        .fields
        .iter()
        .map(|f| {
            format!(
                "(::core::mem::offset_of!({name}, {}), \
                 ::{krate}::datatype::datatype_of::<{}>()),",
                f.name, f.ty
            )
        })
        .collect();
    let code = format!(
        "const _: () = {{
            ::core::assert!(
                !::core::mem::needs_drop::<{name}>(),
                \"derive(Equivalence): struct {name} needs drop, so it is not plain data\"
            );
        }};
        // SAFETY: every field is Equivalence (`datatype_of` requires it) and the struct needs
        // no drop (checked above); the datatype covers exactly the fields' bytes at their
        // offsets, so padding is never read, and received bytes pass each field's checks.
        unsafe impl ::{krate}::datatype::Equivalence for {name} {{
            type Out = ::{krate}::datatype::Datatype;
            fn equivalent_datatype() -> ::{krate}::datatype::Datatype {{
                static DATATYPE: ::std::sync::OnceLock<::{krate}::datatype::Datatype> =
                    ::std::sync::OnceLock::new();
                *DATATYPE.get_or_init(|| {{
                    ::{krate}::datatype::Datatype::derived::<{name}>({name:?}, &[{fields}])
                }})
            }}
        }}"
    );
    code.parse().expect("generated code parses")
}
