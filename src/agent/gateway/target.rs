//! The gateway's allow-list: which request targets it serves, matched on the
//! raw target as the client sent it, before any normalisation.
//!
//! An upstream normalises what the gateway does not: `/v1/./messages`,
//! `/v1/x/../messages` and `/v1/messages/.` all reach a model as
//! `/v1/messages`. So nothing is normalised here and nothing is forwarded by
//! pattern: a target is served only when its method, path and query are
//! exactly one of the listed endpoints (dot segments, encoded or duplicate
//! slashes, another case, a query the API does not take, an absolute-form
//! target — all refused), and the upstream request is built from the
//! matched endpoint, never from the client's path.

use hyper::{Method, Uri};

/// What an endpoint is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A model call: reserved, metered, capped.
    Call,
    /// Forwarded, costs nothing upstream (token counting).
    Free,
    /// loopd's own: a pre-tool-use hook decision.
    Hook,
    /// loopd's own: the agent's escalation.
    Escalate,
    /// Answered by the gateway itself, forwarded nowhere (a CLI's liveness
    /// probe).
    Probe,
}

/// One request target the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: &'static str,
    /// The raw query strings accepted; `""` stands for none at all.
    pub queries: &'static [&'static str],
    pub kind: Kind,
}

impl Endpoint {
    /// The upstream path and query for a request that matched with `query`.
    pub fn upstream(&self, query: Option<&str>) -> String {
        match query {
            Some(q) if !q.is_empty() => format!("{}?{q}", self.path),
            _ => self.path.to_owned(),
        }
    }
}

/// loopd's own endpoints, the same for every agent: reached by the hook
/// and `loopd escalate` from inside the sandbox, with the session token.
pub const LOOPD_ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: "POST",
        path: "/loopd/v1/hook/pre-tool-use",
        queries: &[""],
        kind: Kind::Hook,
    },
    Endpoint {
        method: "POST",
        path: "/loopd/v1/escalate",
        queries: &[""],
        kind: Kind::Escalate,
    },
    Endpoint {
        method: "HEAD",
        path: "/",
        queries: &[""],
        kind: Kind::Probe,
    },
];

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// Not origin-form (`http://host/path`, `host:port`, `*`).
    NotOriginForm,
    /// The path is served, not with this method.
    Method,
    /// The path is served, not with this query.
    Query,
    /// No endpoint has this path.
    Path,
}

impl Miss {
    pub fn as_str(&self) -> &'static str {
        match self {
            Miss::NotOriginForm => "not an origin-form request target",
            Miss::Method => "method not allowed on this endpoint",
            Miss::Query => "query not allowed on this endpoint",
            Miss::Path => "not an endpoint loopd forwards",
        }
    }
}

/// The endpoint `method uri` names exactly, among `allowed`.
pub fn route<'e>(
    method: &Method,
    uri: &Uri,
    allowed: &'e [Endpoint],
) -> Result<(&'e Endpoint, Option<String>), Miss> {
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(Miss::NotOriginForm);
    }
    let path = uri.path();
    let query = uri.query();
    let mut miss = Miss::Path;
    for e in allowed {
        if e.path != path {
            continue;
        }
        if e.method != method.as_str() {
            miss = Miss::Method;
            continue;
        }
        // `?` with nothing after it is a query (an empty one), not none.
        let listed = match query {
            None => e.queries.contains(&""),
            Some("") => false,
            Some(q) => e.queries.contains(&q),
        };
        if !listed {
            miss = Miss::Query;
            continue;
        }
        return Ok((e, query.map(str::to_owned)));
    }
    Err(miss)
}

/// The request target for a log or journal line: printable ASCII only, at
/// most 200 characters.
pub fn printable(uri: &Uri) -> String {
    let s = uri.to_string();
    let mut out: String = s
        .chars()
        .take(200)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if s.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An allow-list of the shape an agent's wire gives (Claude Code's):
    /// the router knows no vendor.
    const API: &[Endpoint] = &[
        Endpoint {
            method: "POST",
            path: "/v1/messages",
            queries: &["", "beta=true"],
            kind: Kind::Call,
        },
        Endpoint {
            method: "POST",
            path: "/v1/messages/count_tokens",
            queries: &["", "beta=true"],
            kind: Kind::Free,
        },
    ];

    fn check(method: &str, target: &str) -> Result<Kind, Miss> {
        let uri: Uri = target.parse().expect("a target hyper accepts");
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        route(&method, &uri, API).map(|(e, _)| e.kind)
    }

    #[test]
    fn only_exact_targets_pass() {
        assert_eq!(check("POST", "/v1/messages"), Ok(Kind::Call));
        assert_eq!(check("POST", "/v1/messages?beta=true"), Ok(Kind::Call));
        assert_eq!(
            check("POST", "/v1/messages/count_tokens?beta=true"),
            Ok(Kind::Free)
        );
        for target in [
            "/v1/./messages",
            "/v1/x/../messages",
            "/v1/messages/.",
            "/v1/messages/",
            "//v1/messages",
            "/v1//messages",
            "/v1/messages%2F",
            "/v1%2Fmessages",
            "/V1/messages",
            "/v1/messages/batches",
            "/v1/complete",
            "/v1/models",
            "/api/oauth/claude_cli/create_api_key",
            "/v1/messages;x",
        ] {
            assert_eq!(check("POST", target), Err(Miss::Path), "{target}");
        }
        assert_eq!(check("GET", "/v1/messages"), Err(Miss::Method));
        assert_eq!(
            check("POST", "/v1/messages?beta=true&x=1"),
            Err(Miss::Query)
        );
        assert_eq!(check("POST", "/v1/messages?beta=false"), Err(Miss::Query));
        assert_eq!(check("POST", "/v1/messages?"), Err(Miss::Query));
        assert_eq!(
            check("POST", "http://127.0.0.1/v1/messages"),
            Err(Miss::NotOriginForm)
        );
    }

    #[test]
    fn the_upstream_path_is_the_endpoints_own() {
        let (e, q) = route(
            &Method::POST,
            &"/v1/messages?beta=true".parse().expect("uri"),
            API,
        )
        .expect("served");
        assert_eq!(e.upstream(q.as_deref()), "/v1/messages?beta=true");
        assert_eq!(e.upstream(None), "/v1/messages");
    }
}
