//! The host a request is for, as the filters that judge or echo it read it.

use praxis_filter::HttpFilterContext;

/// The request's host without port: `Host`, else the URI's authority (as
/// HTTP/2 sends it). An IPv6 literal keeps its brackets.
pub fn request_host<'a>(ctx: &'a HttpFilterContext<'_>) -> Option<&'a str> {
    let authority = ctx
        .request
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| ctx.request.uri.authority().map(|a| a.as_str()))?;
    match authority.strip_prefix('[') {
        Some(rest) => Some(&authority[..rest.find(']')? + 2]),
        None => authority.split(':').next(),
    }
}
