//! Checks on header names, header values and hostnames, so that a filter
//! Praxis would refuse at load is refused here, naming the field, instead of
//! breaking the whole Gateway's config.

use std::borrow::Cow;

use crate::Error;

/// An HTTP header name (RFC 9110 token), lowercased (copied only when it
/// has capitals). The caller names the field ([`Error::at`]).
pub fn header_name<'a>(name: &Cow<'a, str>) -> Result<Cow<'a, str>, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the header name is empty"));
    }
    if !name.bytes().all(is_tchar) {
        return Err(Error::invalid(format!(
            "`{name}` is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
        )));
    }
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Ok(Cow::Owned(name.to_ascii_lowercase()))
    } else {
        Ok(name.clone())
    }
}

/// A header value Praxis can send: visible ASCII, spaces and tabs. The
/// caller names the field ([`Error::at`]).
pub fn header_value(value: &str) -> Result<&str, Error> {
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(Error::invalid("the value contains a line break or NUL"));
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Err(Error::unsupported(
            "Praxis only sends header values of visible ASCII characters, spaces and tabs",
        ));
    }
    Ok(value)
}

/// A DNS hostname (no wildcard, no port).
pub fn hostname<'a>(host: &'a str, field: &str) -> Result<&'a str, Error> {
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if valid {
        Ok(host)
    } else {
        Err(Error::invalid(format!(
            "{field}: `{host}` is not a valid hostname"
        )))
    }
}

/// A path to put in an URL: absolute, no query or fragment, no whitespace.
pub fn path<'a>(path: &'a str, field: &str) -> Result<&'a str, Error> {
    if !path.starts_with('/') {
        return Err(Error::invalid(format!(
            "{field}: `{path}` does not start with `/`"
        )));
    }
    if path
        .bytes()
        .any(|b| b <= b' ' || b == b'?' || b == b'#' || b == 0x7f)
    {
        return Err(Error::invalid(format!(
            "{field}: `{path}` contains whitespace, a control character, `?` or `#`"
        )));
    }
    if path.contains("${") {
        return Err(Error::unsupported(format!(
            "{field}: `${{` would be read as a placeholder by Praxis's templates"
        )));
    }
    Ok(path)
}

/// `s` as literal text in a regex replacement (`$` doubled).
pub fn replacement_literal(s: &str) -> String {
    s.replace('$', "$$")
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_tokens_lowercased() {
        assert_eq!(header_name(&"X-Custom".into()).unwrap(), "x-custom");
        assert!(
            matches!(header_name(&"".into()).map_err(|e| e.at("f")), Err(Error::InvalidInput(m)) if m == "f: the header name is empty")
        );
        assert!(
            matches!(header_name(&"a b".into()), Err(Error::InvalidInput(m)) if m.contains("`a b` is not a valid"))
        );
    }

    #[test]
    fn header_values_praxis_cannot_send_are_refused() {
        assert_eq!(header_value("a b\tc").unwrap(), "a b\tc");
        assert!(matches!(
            header_value("a\r\nb"),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(header_value("grüß"), Err(Error::Unsupported(_))));
    }

    #[test]
    fn hostnames_and_paths() {
        assert!(hostname("a-b.example.com", "f").is_ok());
        for bad in ["", "a..b", "-a.com", "a_b.com", "a.com:80", "*.a.com"] {
            assert!(hostname(bad, "f").is_err(), "{bad}");
        }
        assert!(path("/a/b", "f").is_ok());
        for bad in ["a", "/a b", "/a?b", "/a#b"] {
            assert!(
                matches!(path(bad, "f"), Err(Error::InvalidInput(_))),
                "{bad}"
            );
        }
        assert!(matches!(path("/${x}", "f"), Err(Error::Unsupported(_))));
        assert_eq!(replacement_literal("/a$1"), "/a$$1");
    }
}
