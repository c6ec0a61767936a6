//! What a config filter module cannot know of the listener and the match
//! it is written for, left as a placeholder in its entries and filled in as
//! each entry is written:
//!
//! | placeholder | value |
//! |---|---|
//! | `${pontoon_listener_scheme}` | `http` or `https`, the listener's protocol |
//! | `${pontoon_listener_port}` | the listener's port |
//! | `${pontoon_port_suffix}` | `:PORT` of the listener, empty when it is the scheme's default |
//! | `${pontoon_port_suffix:N}` | `:N`, empty when N is the listener scheme's default port |
//! | `${pontoon_match_prefix}` | the matched PathPrefix without its trailing `/`, regex-escaped; the entry is repeated per match, each gated on its match |

use crate::data_plane::model::Protocol;

pub const LISTENER_SCHEME: &str = "${pontoon_listener_scheme}";
pub const LISTENER_PORT: &str = "${pontoon_listener_port}";
pub const PORT_SUFFIX: &str = "${pontoon_port_suffix}";
/// Followed by `:N}`.
pub const PORT_SUFFIX_OF: &str = "${pontoon_port_suffix:";
pub const MATCH_PREFIX: &str = "${pontoon_match_prefix}";
const PLACEHOLDER_START: &str = "${pontoon_";

/// The listener a rule's entries are written for.
#[derive(Clone, Copy, Debug)]
pub struct ListenerFacts {
    pub protocol: Protocol,
    pub port: u16,
}

pub(super) fn fill_str(s: &str, listener: ListenerFacts, match_prefix: Option<&str>) -> String {
    let scheme = listener.protocol.scheme();
    let suffix = |port: u16| {
        let default = match listener.protocol {
            Protocol::Http => 80,
            Protocol::Https | Protocol::TlsPassthrough | Protocol::TlsTerminate => 443,
            // No HTTP filter runs on a TCP listener: never filled.
            Protocol::Tcp => 0,
        };
        if port == default {
            String::new()
        } else {
            format!(":{port}")
        }
    };
    let mut out = s
        .replace(LISTENER_SCHEME, scheme)
        .replace(LISTENER_PORT, &listener.port.to_string())
        .replace(PORT_SUFFIX, &suffix(listener.port));
    if let Some(prefix) = match_prefix {
        out = out.replace(MATCH_PREFIX, prefix);
    }
    while let Some(start) = out.find(PORT_SUFFIX_OF) {
        let rest = &out[start + PORT_SUFFIX_OF.len()..];
        let Some(end) = rest.find('}') else { break };
        let Ok(port) = rest[..end].parse::<u16>() else {
            break;
        };
        let whole = format!("{PORT_SUFFIX_OF}{}}}", &rest[..end]);
        out = out.replacen(&whole, &suffix(port), 1);
    }
    out
}

/// The first `${pontoon_...}` in `s` that is not a known placeholder.
pub(super) fn unknown_placeholder(s: &str) -> Option<String> {
    let mut rest = s;
    while let Some(start) = rest.find(PLACEHOLDER_START) {
        let tail = &rest[start..];
        let end = tail.find('}').map_or(tail.len(), |e| e + 1);
        let placeholder = &tail[..end];
        let known = [LISTENER_SCHEME, LISTENER_PORT, PORT_SUFFIX, MATCH_PREFIX]
            .contains(&placeholder)
            || placeholder
                .strip_prefix(PORT_SUFFIX_OF)
                .and_then(|p| p.strip_suffix('}'))
                .is_some_and(|p| p.parse::<u16>().is_ok());
        if !known {
            return Some(placeholder.to_string());
        }
        rest = &tail[end..];
    }
    None
}

/// Whether `s` may hold a placeholder: a byte search first, since most
/// strings of most entries hold none.
pub(super) fn may_hold_placeholder(s: &str) -> bool {
    s.contains('$') && s.contains(PLACEHOLDER_START)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(port: u16) -> ListenerFacts {
        ListenerFacts {
            protocol: Protocol::Http,
            port,
        }
    }

    #[test]
    fn placeholders_take_the_listener() {
        let s = "${pontoon_listener_scheme}://${host}${pontoon_port_suffix}${path}";
        assert_eq!(fill_str(s, http(80), None), "http://${host}${path}");
        assert_eq!(fill_str(s, http(8080), None), "http://${host}:8080${path}");
        let https = ListenerFacts {
            protocol: Protocol::Https,
            port: 443,
        };
        assert_eq!(fill_str(s, https, None), "https://${host}${path}");
        let explicit = "x${pontoon_port_suffix:443}y${pontoon_port_suffix:80}z";
        assert_eq!(fill_str(explicit, https, None), "xy:80z");
        assert_eq!(fill_str(explicit, http(80), None), "x:443yz");
        assert_eq!(fill_str("${pontoon_listener_port}", http(81), None), "81");
    }
}
