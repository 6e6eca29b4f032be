//! OAuth 2.1 client credentials for MCP servers that ask for them, as the MCP
//! authorization specification describes: a `401` whose `WWW-Authenticate` names the
//! server's protected resource metadata (RFC 9728), which names its authorization
//! server, whose metadata (RFC 8414) names the token endpoint, where the client
//! credentials buy an access token for the server (the `resource` of RFC 8707).
//!
//! Every request goes through the tenant's egress client (the metadata URLs come from
//! the server, so they are as untrusted as it is); the metadata must name the resource
//! and issuer it was asked for. The client secret goes only to an authorization server
//! over https (loopback aside), and only to the issuer the admin pinned, or else to a
//! token endpoint on the origin of the issuer the server named: a server cannot send the
//! secret to a host of its choosing. Tokens are kept in memory per server URL, client
//! and scope until shortly before they expire (a day at most), so a call does not buy
//! one each time.

use super::McpFailure;
use crate::TenantEgress;
use baton_core::ports::ClientCredentials;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// The largest metadata document or token answer read.
const MAX_BYTES: usize = 64 * 1024;
/// A token is used until this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// Tokens kept at most (the oldest are dropped beyond it).
const MAX_CACHED: usize = 1024;
/// The longest a token is kept, whatever its `expires_in` says.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A token's lifetime when the answer does not say.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// A server URL, client id, client secret, scope and pinned issuer.
type Key = (String, String, String, Option<String>, Option<String>);

/// Access tokens bought, by server URL and credentials (a changed secret or scope buys a
/// new token), with when each stops being used; shared by the process's MCP connections.
#[derive(Clone, Default)]
pub struct TokenCache {
    tokens: Arc<Mutex<HashMap<Key, (String, Instant)>>>,
}

impl TokenCache {
    pub(super) fn get(&self, url: &url::Url, c: &ClientCredentials) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens
            .get(&key(url, c))
            .filter(|(_, until)| *until > Instant::now())
            .map(|(token, _)| token.clone())
    }

    fn put(&self, url: &url::Url, c: &ClientCredentials, token: String, until: Instant) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        tokens.retain(|_, (_, t)| *t > now);
        if tokens.len() >= MAX_CACHED {
            tokens.clear();
        }
        tokens.insert(key(url, c), (token, until));
    }

    pub(super) fn forget(&self, url: &url::Url, c: &ClientCredentials) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens.remove(&key(url, c));
    }
}

fn key(url: &url::Url, c: &ClientCredentials) -> Key {
    (
        url.to_string(),
        c.client_id.clone(),
        c.client_secret.clone(),
        c.scope.clone(),
        c.issuer.clone(),
    )
}

/// Buys an access token for the MCP server at `resource`, whose `401` said
/// `challenge` (its `WWW-Authenticate`), and keeps it in `cache`. Whatever went wrong
/// on the way is an [`McpFailure::Auth`] (or the policy's refusal): nothing reached the
/// tool.
pub(super) async fn token(
    egress: &TenantEgress,
    cache: &TokenCache,
    resource: &url::Url,
    challenge: Option<&str>,
    c: &ClientCredentials,
    deadline: Instant,
) -> Result<String, McpFailure> {
    buy(egress, cache, resource, challenge, c, deadline)
        .await
        .map_err(|f| match f {
            McpFailure::Denied(_) | McpFailure::Auth(_) => f,
            McpFailure::Status(status) => {
                auth(&format!("an OAuth metadata request answered HTTP {status}"))
            }
            other => auth(&other.to_string()),
        })
}

async fn buy(
    egress: &TenantEgress,
    cache: &TokenCache,
    resource: &url::Url,
    challenge: Option<&str>,
    c: &ClientCredentials,
    deadline: Instant,
) -> Result<String, McpFailure> {
    let metadata_url = match challenge.and_then(resource_metadata) {
        Some(url) => parse(&url, "the server's resource_metadata")?,
        None => well_known(resource, "oauth-protected-resource"),
    };
    let pr = get_json(egress, &metadata_url, deadline).await?;
    let named = pr
        .get("resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !same_resource(named, resource) {
        return Err(auth(
            "the server's protected resource metadata names another resource",
        ));
    }
    let issuer = pr
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .ok_or_else(|| auth("the server's metadata names no authorization server"))?;
    let issuer = secure(
        parse(issuer, "the authorization server")?,
        "the authorization server",
    )?;
    if let Some(pinned) = &c.issuer
        && !same_resource(pinned, &issuer)
    {
        return Err(auth(
            "the server names an authorization server other than the pinned issuer",
        ));
    }
    let asm = authorization_server(egress, &issuer, deadline).await?;
    let endpoint = asm
        .get("token_endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| auth("the authorization server's metadata has no token_endpoint"))?;
    let endpoint = secure(parse(endpoint, "the token endpoint")?, "the token endpoint")?;
    if c.issuer.is_none() && endpoint.origin() != issuer.origin() {
        return Err(auth(
            "the token endpoint is not on the issuer's origin (pin the issuer to trust it)",
        ));
    }
    let post_only = asm
        .get("token_endpoint_auth_methods_supported")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter().any(|m| m == "client_secret_post")
                && !m.iter().any(|m| m == "client_secret_basic")
        });
    // Built apart: the serializer may not be held across an await.
    let form = {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        form.append_pair("resource", resource.as_str());
        if let Some(scope) = &c.scope {
            form.append_pair("scope", scope);
        }
        if post_only {
            form.append_pair("client_id", &c.client_id);
            form.append_pair("client_secret", &c.client_secret);
        }
        form.finish()
    };
    let mut req = egress
        .request(reqwest::Method::POST, &endpoint)
        .map_err(|d| McpFailure::Denied(d.to_string()))?
        .timeout(super::time_left(deadline)?)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json")
        .body(form);
    if !post_only {
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        req = req.basic_auth(enc(&c.client_id), Some(enc(&c.client_secret)));
    }
    let resp = req.send().await.map_err(|e| super::failure(&e))?;
    let status = resp.status().as_u16();
    let answer = read(resp, deadline).await?;
    if !(200..300).contains(&status) {
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error code")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect::<String>();
        return Err(auth(&format!(
            "the authorization server refused the client credentials (HTTP {status}, {error})"
        )));
    }
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| {
            !t.is_empty() && t.len() <= 8192 && t.bytes().all(|b| (0x21..0x7f).contains(&b))
        })
        .ok_or_else(|| auth("the token answer holds no usable access_token"))?
        .to_string();
    let lifetime = answer
        .get("expires_in")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_LIFETIME, Duration::from_secs)
        .min(MAX_LIFETIME);
    let until = Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN);
    cache.put(resource, c, token.clone(), until);
    Ok(token)
}

/// The authorization server's metadata (RFC 8414 at the path-inserted well-known URL,
/// then OpenID Connect discovery), which must name `issuer`.
async fn authorization_server(
    egress: &TenantEgress,
    issuer: &url::Url,
    deadline: Instant,
) -> Result<Value, McpFailure> {
    let mut oidc = issuer.clone();
    oidc.set_path(&format!(
        "{}/.well-known/openid-configuration",
        issuer.path().trim_end_matches('/')
    ));
    let candidates = [well_known(issuer, "oauth-authorization-server"), oidc];
    for url in candidates {
        let Ok(m) = get_json(egress, &url, deadline).await else {
            continue;
        };
        let named = m.get("issuer").and_then(Value::as_str).unwrap_or_default();
        if !same_resource(named, issuer) {
            return Err(auth(
                "the authorization server's metadata names another issuer",
            ));
        }
        return Ok(m);
    }
    Err(auth("the authorization server publishes no metadata"))
}

/// `https://host/.well-known/<name>/<path>` for `url` (the RFC 8414 / RFC 9728 form).
fn well_known(url: &url::Url, name: &str) -> url::Url {
    let mut w = url.clone();
    let path = url.path().trim_end_matches('/');
    w.set_path(&format!("/.well-known/{name}{path}"));
    w.set_query(None);
    w.set_fragment(None);
    w
}

/// The `resource_metadata` parameter of a `WWW-Authenticate: Bearer ...` challenge.
fn resource_metadata(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_string())
}

fn same_resource(named: &str, url: &url::Url) -> bool {
    named.trim_end_matches('/') == url.as_str().trim_end_matches('/')
}

/// `url`, if the client secret may be sent to it: over https, or to a loopback host.
fn secure(url: url::Url, what: &str) -> Result<url::Url, McpFailure> {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "https" || loopback {
        Ok(url)
    } else {
        Err(auth(&format!("{what} is not an https URL")))
    }
}

fn parse(url: &str, what: &str) -> Result<url::Url, McpFailure> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(u),
        _ => Err(auth(&format!("{what} is not an http(s) URL"))),
    }
}

fn auth(why: &str) -> McpFailure {
    McpFailure::Auth(why.to_string())
}

async fn get_json(
    egress: &TenantEgress,
    url: &url::Url,
    deadline: Instant,
) -> Result<Value, McpFailure> {
    let resp = egress
        .request(reqwest::Method::GET, url)
        .map_err(|d| McpFailure::Denied(d.to_string()))?
        .timeout(super::time_left(deadline)?)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| super::failure(&e))?;
    if !resp.status().is_success() {
        return Err(McpFailure::Status(resp.status().as_u16()));
    }
    read(resp, deadline).await
}

async fn read(resp: reqwest::Response, deadline: Instant) -> Result<Value, McpFailure> {
    let bytes = super::read_body(resp, deadline, MAX_BYTES).await?;
    serde_json::from_slice(&bytes).map_err(|_| auth("a metadata or token answer is not JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_names_the_metadata_quoted_or_not() {
        let quoted = r#"Bearer error="invalid_token", resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            resource_metadata(quoted).as_deref(),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata("Bearer resource_metadata=https://a.example/m, realm=x").as_deref(),
            Some("https://a.example/m")
        );
        assert_eq!(resource_metadata("Bearer realm=\"x\""), None);
    }

    #[test]
    fn the_secret_goes_over_https_or_to_loopback_only() {
        let ok = |u: &str| secure(url::Url::parse(u).expect("url"), "x").is_ok();
        assert!(ok("https://as.example/token"));
        assert!(ok("http://127.0.0.1:8080/token"));
        assert!(ok("http://[::1]/token"));
        assert!(ok("http://localhost/token"));
        assert!(!ok("http://as.example/token"));
        assert!(!ok("http://10.0.0.1/token"));
    }

    #[test]
    fn well_known_urls_insert_the_path() {
        let u = url::Url::parse("https://a.example/tenant/mcp?x=1").expect("url");
        assert_eq!(
            well_known(&u, "oauth-protected-resource").as_str(),
            "https://a.example/.well-known/oauth-protected-resource/tenant/mcp"
        );
        let root = url::Url::parse("https://as.example/").expect("url");
        assert_eq!(
            well_known(&root, "oauth-authorization-server").as_str(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
    }
}
