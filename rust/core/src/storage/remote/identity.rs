//! What identifies the object a store was opened from, and how a response shows another
//! version: every request of a file asks for the version its open found (`Identity`), and a
//! server that refuses (`precondition_failed`) or answers for another one ends the read with
//! `Error::Changed`.

use std::ops::Range;

/// What identifies the object a store was opened from, as its server states it in every
/// response (`ObjectMeta`): its size, and whichever of an S3/GCS/Azure version, an ETag and a
/// Last-Modified it gives. The open's pins every later request (`fetch`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub version: Option<String>,
    pub e_tag: Option<String>,
    /// Seconds since the epoch (`None`: the server sent none).
    pub last_modified: Option<i64>,
}

impl Identity {
    pub(super) fn of(meta: &object_store::ObjectMeta) -> Identity {
        // object_store reads a missing Last-Modified as the epoch.
        let seconds = meta.last_modified.timestamp();
        Identity {
            size: meta.size,
            version: meta.version.clone(),
            e_tag: meta.e_tag.clone(),
            last_modified: (seconds != 0).then_some(seconds),
        }
    }

    /// The ETag, if strong: a weak one (`W/...`) never matches `If-Match` (RFC 9110 compares
    /// strongly), and may stay the same while the bytes change.
    fn strong_e_tag(&self) -> Option<&str> {
        self.e_tag.as_deref().filter(|tag| !tag.starts_with("W/"))
    }

    /// Whether anything but the size ties the object to one version: a version, a strong ETag
    /// or a Last-Modified. Bytes of an object that nothing pins are never shared (`RemoteFile`).
    pub fn pins(&self) -> bool {
        self.version.is_some() || self.strong_e_tag().is_some() || self.last_modified.is_some()
    }

    /// Whether a server check ties every response to the version opened: a version, or a
    /// strong ETag (`If-Match`). Else (Last-Modified alone, or a weak ETag) a replacement that
    /// keeps them is not seen in a response: `RemoteFile::fetch` checks the header after.
    pub fn pins_strongly(&self) -> bool {
        self.version.is_some() || self.strong_e_tag().is_some()
    }

    /// A range request for this object only: its version (S3, GCS, Azure: that version is
    /// served even after a replacement) and `If-Match` its strong ETag (the server checks it);
    /// `differs` checks every response besides, for what the server does not.
    pub(super) fn get_options(&self, range: Range<u64>) -> object_store::GetOptions {
        object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(range)),
            if_match: self.strong_e_tag().map(str::to_string),
            version: self.version.clone(),
            ..Default::default()
        }
    }

    /// `get_options` for the whole object (a server that ignores Range: `Remote::fetch_whole`).
    pub(super) fn whole_options(&self) -> object_store::GetOptions {
        object_store::GetOptions {
            range: None,
            ..self.get_options(0..0)
        }
    }

    /// How `response` (a response's identity) shows another object than this one, if it does:
    /// another size, version, ETag (weak ones included) or Last-Modified.
    pub(super) fn differs(&self, response: &Identity) -> Option<String> {
        if response.size != self.size {
            return Some(format!(
                "its size is {} bytes, not {}",
                response.size, self.size
            ));
        }
        if self.version.is_some() && response.version != self.version {
            return Some(format!(
                "its version is {:?}, not {:?}",
                response.version.as_deref().unwrap_or("none"),
                self.version.as_deref().unwrap_or_default()
            ));
        }
        if response.e_tag != self.e_tag {
            return Some(format!(
                "its ETag is {}, not {}",
                response.e_tag.as_deref().unwrap_or("none"),
                self.e_tag.as_deref().unwrap_or("none")
            ));
        }
        if response.last_modified != self.last_modified {
            return Some("its Last-Modified changed".to_string());
        }
        None
    }

    /// What a server's 412 (`If-Match` failed) says changed.
    pub(super) fn describe(&self) -> String {
        match self.strong_e_tag() {
            Some(tag) => format!("its ETag is no longer {tag}"),
            None => "it was modified since".to_string(),
        }
    }
}

/// Whether `e` is a 412 answer to `If-Match`: object_store's S3, GCS and Azure clients say so
/// (`Precondition`); its HTTP client passes the status on as a generic error, whose causes name
/// it (nginx and Apache answer 412 to an `If-Match` of a replaced file).
pub(super) fn precondition_failed(e: &object_store::Error) -> bool {
    if matches!(e, object_store::Error::Precondition { .. }) {
        return true;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = cause {
        if error.to_string().contains("412 Precondition Failed") {
            return true;
        }
        cause = error.source();
    }
    false
}
