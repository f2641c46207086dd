//! URLs as docstore shows and keeps them: never with their credentials.
//!
//! A URL may carry secrets: a password or token in its userinfo (`https://user:pass@host/...`),
//! a presigned query string (`X-Amz-Signature=...`, `X-Goog-Signature=...`, an Azure SAS
//! `sv=...&sig=...`), a fragment. docstore sends none of them (object_store builds each request
//! from the host and the object path, and takes credentials from the environment and
//! `storage_options`), but a message, a `repr`, `.path` or a pickle that showed the URL as given
//! would hand them to logs. So every URL shown goes through `redact`, every object path and
//! every URL kept for later (file URLs of a collection, pickles) through `without_credentials`,
//! and every message that wraps another library's error through `redact_text`.
//!
//! The one userinfo that is not a secret: the container of Azure's `abfs[s]://container@account`
//! URLs, which object_store reads from there. It is kept; a password beside it is not.

/// `url` with every secret it may hold replaced by `***`: the userinfo (`***@`), each value of the
/// query string (`?X-Amz-Signature=***&X-Amz-Credential=***`: the names stay, they help), the
/// fragment. The rest is left as given. Text that is not a URL (no `://`) is returned unchanged.
///
/// Done on the text, not on a parsed URL: a URL that does not parse is shown too (in the error
/// that says so), and the authority is taken as far as the first `/`, `?` or `#`, which is at
/// least as far as any parser takes it, so that a userinfo is never shown, at worst more hidden.
pub fn redact(url: &str) -> String {
    let Some(sep) = url.find("://") else {
        return url.to_string();
    };
    let (scheme, rest) = (&url[..sep], &url[sep + 3..]);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    out.push_str("://");
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            if keeps_username(scheme) && !userinfo.contains(':') {
                out.push_str(userinfo);
            } else if keeps_username(scheme) {
                let user = userinfo.split(':').next().unwrap_or_default();
                out.push_str(user);
                out.push_str(":***");
            } else {
                out.push_str("***");
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_end..];
    let path_end = tail.find(['?', '#']).unwrap_or(tail.len());
    out.push_str(&tail[..path_end]);
    let tail = &tail[path_end..];
    let (query, fragment) = match tail.find('#') {
        Some(hash) => (&tail[..hash], Some(&tail[hash..])),
        None => (tail, None),
    };
    if let Some(query) = query.strip_prefix('?') {
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, _)) => {
                    out.push_str(name);
                    out.push_str("=***");
                }
                None if pair.is_empty() => {}
                None => out.push_str("***"),
            }
        }
    }
    if fragment.is_some() {
        out.push_str("#***");
    }
    out
}

/// Whether a scheme's userinfo names something other than a secret (Azure's container).
fn keeps_username(scheme: &str) -> bool {
    scheme.eq_ignore_ascii_case("abfs") || scheme.eq_ignore_ascii_case("abfss")
}

/// `url` without what may hold a secret: the userinfo (but Azure's container, see the module
/// note), the query string and the fragment; `None` if it does not parse. What reopening the
/// store needs and docstore uses: the scheme, host, port and path, as the URL parser gives them.
pub fn without_credentials(url: &str) -> Option<String> {
    let mut parsed = ::url::Url::parse(url).ok()?;
    let user = !parsed.username().is_empty() && !keeps_username(parsed.scheme());
    if !user
        && parsed.password().is_none()
        && parsed.query().is_none()
        && parsed.fragment().is_none()
    {
        return Some(url.to_string()); // nothing to take out: the URL as given, not re-serialised
    }
    if !keeps_username(parsed.scheme()) {
        // Fails only for URLs that cannot have a userinfo, which then have none.
        let _ = parsed.set_username("");
    }
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    parsed.set_fragment(None);
    Some(parsed.into())
}

/// `text` with every URL in it (`scheme://...`, up to the next white space or quote) redacted:
/// for messages that wrap another library's error, which may show the URL it requested.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` just before `://`.
        let scheme_start = rest[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| sep + i);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_query_and_fragment() {
        assert_eq!(
            redact("https://user:hunter2@host:8080/a/b.docstore"),
            "https://***@host:8080/a/b.docstore"
        );
        assert_eq!(redact("http://token@host/x"), "http://***@host/x");
        assert_eq!(
            redact("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F&X-Amz-Signature=abc#f"),
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***#***"
        );
        assert_eq!(
            redact("https://acct.blob.core.windows.net/c/b?sv=2022&sig=s3cr3t&bare"),
            "https://acct.blob.core.windows.net/c/b?sv=***&sig=***&***"
        );
        assert_eq!(
            redact("s3://bucket/key.docstore"),
            "s3://bucket/key.docstore"
        );
        assert_eq!(redact("/local/path"), "/local/path");
        // An `@` in the path is not a userinfo; one past a `\` may be (a parser may stop there).
        assert_eq!(redact("http://host/a@b"), "http://host/a@b");
        assert_eq!(redact("http://u:p@host\\a@b/c"), "http://***@b/c");
        // Azure's container stays, a password beside it does not.
        assert_eq!(
            redact("abfss://container@acct.dfs.core.windows.net/x"),
            "abfss://container@acct.dfs.core.windows.net/x"
        );
        assert_eq!(
            redact("abfs://container:pw@acct.dfs.core.windows.net/x"),
            "abfs://container:***@acct.dfs.core.windows.net/x"
        );
        // A URL that does not parse is redacted all the same.
        assert_eq!(
            redact("http://u:p@host:99999999/x?a=b"),
            "http://***@host:99999999/x?a=***"
        );
    }

    #[test]
    fn strips_what_may_be_secret() {
        assert_eq!(
            without_credentials("https://user:pw@host/a/b?sig=1#x").as_deref(),
            Some("https://host/a/b")
        );
        assert_eq!(
            without_credentials("abfss://c:pw@acct.dfs.core.windows.net/x").as_deref(),
            Some("abfss://c@acct.dfs.core.windows.net/x")
        );
        assert_eq!(without_credentials("not a url"), None);
        // Nothing to take out: as given (not re-serialised).
        assert_eq!(
            without_credentials("HTTP://Host/a b").as_deref(),
            Some("HTTP://Host/a b")
        );
    }

    #[test]
    fn redacts_every_url_in_a_text() {
        assert_eq!(
            redact_text("error sending request for url (http://u:p@h/x): refused"),
            "error sending request for url (http://***@h/x): refused"
        );
        assert_eq!(
            redact_text("\"s3://u:p@b/k\" and https://h/y?t=1 end"),
            "\"s3://***@b/k\" and https://h/y?t=*** end"
        );
        assert_eq!(redact_text("no url here: a://"), "no url here: a://");
    }
}
