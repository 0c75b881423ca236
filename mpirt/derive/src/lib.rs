//! `#[derive(Equivalence)]` for mpirt, parsing the struct by hand (no syn or quote).
//!
//! Accepted: a `#[repr(C)]` struct with named fields and no generics. The generated code
//! checks at compile time that every field is `Equivalence`, that the fields' sizes add up to
//! the struct's size (no padding, which would send uninitialized bytes), and that the struct
//! needs no drop.

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

/// Whether an attribute's bracket group is `repr(...)` naming `C`.
fn is_repr_c(group: &proc_macro::Group) -> bool {
    let mut tokens = group.stream().into_iter();
    match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Ident(name)), Some(TokenTree::Group(args)))
            if name.to_string() == "repr" =>
        {
            args.stream()
                .into_iter()
                .any(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "C"))
        }
        _ => false,
    }
}

fn parse(input: TokenStream) -> Result<Item, String> {
    let mut tokens = input.into_iter().peekable();
    let mut repr_c = false;
    let name = loop {
        match tokens.next() {
            Some(TokenTree::Punct(p)) if p.as_char() == '#' => {
                if let Some(TokenTree::Group(g)) = tokens.next() {
                    repr_c |= is_repr_c(&g);
                }
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
    if !repr_c {
        return Err(format!(
            "derive(Equivalence) needs #[repr(C)] on struct {name}: without it Rust may reorder \
             the fields, and the layout must be the same in every rank"
        ));
    }
    let body = match tokens.next() {
        Some(TokenTree::Punct(p)) if p.as_char() == '<' => {
            return Err(format!(
                "derive(Equivalence) does not support generic structs ({name}); implement \
                 Equivalence by hand"
            ))
        }
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g.stream(),
        _ => {
            return Err(format!(
                "derive(Equivalence) needs named fields (struct {name} {{ a: T, ... }}); tuple \
                 and unit structs are not supported"
            ))
        }
    };
    Ok(Item {
        fields: parse_fields(body)?,
        name,
    })
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
    let sizes: String = item
        .fields
        .iter()
        .map(|f| format!(" + ::core::mem::size_of::<{}>()", f.ty))
        .collect();
    let needs_check: String = item
        .fields
        .iter()
        .map(|f| {
            format!(
                " || <{} as ::{krate}::datatype::Equivalence>::equivalent_datatype().needs_check()",
                f.ty
            )
        })
        .collect();
    let checks: String = item
        .fields
        .iter()
        .map(|f| {
            format!(
                " && ::{krate}::datatype::Datatype::field_is_valid::<{}>(bytes, \
                 ::core::mem::offset_of!({name}, {}))",
                f.ty, f.name
            )
        })
        .collect();
    let code = format!(
        "const _: () = {{
            ::core::assert!(
                0usize{sizes} == ::core::mem::size_of::<{name}>(),
                \"derive(Equivalence): struct {name} has padding (its fields' sizes do not add \
                 up to its size); sending it would read uninitialized bytes: reorder the fields \
                 or add explicit padding fields\"
            );
            ::core::assert!(
                !::core::mem::needs_drop::<{name}>(),
                \"derive(Equivalence): struct {name} needs drop, so it is not plain data\"
            );
        }};
        // SAFETY: checked above and by the field types: #[repr(C)], no padding, no drop, and
        // every field is Equivalence; received bytes pass each field's check.
        unsafe impl ::{krate}::datatype::Equivalence for {name} {{
            fn equivalent_datatype() -> ::{krate}::datatype::Datatype {{
                // A struct of unchecked fields leaves `bytes` unused.
                #[allow(unused_variables)]
                fn check(bytes: &[u8]) -> bool {{
                    true{checks}
                }}
                let size = ::core::mem::size_of::<{name}>();
                if false{needs_check} {{
                    ::{krate}::datatype::Datatype::checked(size, {name:?}, check)
                }} else {{
                    ::{krate}::datatype::Datatype::plain(size, {name:?})
                }}
            }}
        }}"
    );
    code.parse().expect("generated code parses")
}
