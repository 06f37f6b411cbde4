//! The subject prefixes a handler may not publish to with a subject its data chose: the
//! JetStream API and acknowledgements, the KV and object stores, the system account, inboxes.

use crate::error::{PublishError, PublishErrorKind};

/// The subject prefixes `publish_to` refuses unless the call opts in
/// ([`Context::publish_to_reserved`](crate::Context::publish_to_reserved)): the JetStream API, JetStream acknowledgements (another
/// consumer's messages), the KV and object stores (idempotency keys live in a KV bucket), the
/// system account, reply inboxes.
pub const RESERVED_PREFIXES: [&str; 6] =
    ["$JS.API.", "$JS.ACK.", "$KV.", "$O.", "$SYS.", "_INBOX."];

/// The reserved prefix `subject` is under (or is, without its dot), if any: what `publish_to`
/// and requests refuse.
pub fn reserved_prefix(subject: &str) -> Option<&'static str> {
    RESERVED_PREFIXES
        .into_iter()
        .find(|prefix| subject.starts_with(prefix) || subject == &prefix[..prefix.len() - 1])
}

/// Refuses a request's reply subject under a reserved prefix other than `_INBOX.`: the
/// requester chose it, and answering `$JS.API.STREAM.DELETE.X` or a `$KV.` key would act on
/// the server with the app's permissions.
pub(crate) fn refuse_reserved_reply(reply_to: &str) -> Result<(), PublishError> {
    match reserved_prefix(reply_to) {
        Some(prefix) if prefix != "_INBOX." => Err(PublishError::new(
            PublishErrorKind::Reserved,
            reply_to,
        )
        .with_source(format!(
            "the request's reply subject `{reply_to}` is under the reserved prefix `{prefix}`, which is not an inbox; nothing was sent to it"
        ))),
        _ => Ok(()),
    }
}

/// Refuses `subject`, filled from `template` with a value's fields, when it is under a reserved
/// prefix the template does not start with: the value, not the code, chose the prefix
/// (`{area}.idem.{key}` filled with `$KV`).
pub(crate) fn refuse_filled_reserved(template: &str, subject: &str) -> Result<(), PublishError> {
    match reserved_prefix(subject) {
        Some(prefix) if !template.starts_with(prefix) => Err(PublishError::new(
            PublishErrorKind::Reserved,
            subject,
        )
        .with_source(format!(
            "`{subject}`, filled from `{template}`, is under the reserved prefix `{prefix}`, which a value's fields may not choose; nothing was published"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__private::fill_subject;

    #[test]
    fn kv_object_store_and_acks_are_reserved() {
        for subject in [
            "$KV.IDEM.k",
            "$O.FILES.C.x",
            "$JS.ACK.S.c.1.1.1.0.0",
            "$JS.ACK",
        ] {
            assert!(reserved_prefix(subject).is_some(), "{subject}");
        }
        for subject in ["KV.IDEM.k", "orders.$KV", "$JS.ACKS", "$OBJ.x"] {
            assert_eq!(reserved_prefix(subject), None, "{subject}");
        }
    }

    #[test]
    fn a_value_may_not_choose_a_reserved_prefix() {
        let err = fill_subject("{area}.idem.{key}", &[("area", &"$KV"), ("key", &"k")])
            .expect_err("the value chose `$KV.`");
        assert_eq!(err.kind(), PublishErrorKind::Reserved);
        assert!(err.to_string().contains("$KV.idem.k"), "{err}");
        // The template's own prefix is the code's choice.
        assert_eq!(
            fill_subject("$KV.{bucket}.seen", &[("bucket", &"IDEM")]).expect("allowed"),
            "$KV.IDEM.seen"
        );
        assert!(fill_subject("{area}.idem.{key}", &[("area", &"orders"), ("key", &"k")]).is_ok());
    }
}
