//! A stream declared at startup with the limits it asks for, and how a declaration meets a
//! stream that already exists: its subjects are added (never removed), a limit is raised but
//! never tightened (tightening could discard stored messages or weaken deduplication).

use std::time::Duration;

use super::StreamSpec;

/// A stream to declare at startup: its name and subjects, and the replicas and limits it is
/// created with ([`NatsBroker::declare_stream_with`](crate::NatsBroker::declare_stream_with)).
///
/// ```
/// use std::time::Duration;
/// use ruststream_nats::transport::StreamDeclaration;
///
/// let payments = StreamDeclaration::new("PAYMENTS", ["payments.>"])
///     .replicas(3)
///     .max_age(Duration::from_secs(7 * 24 * 3600))
///     .duplicate_window(Duration::from_secs(300));
/// assert_eq!(payments.replicas, Some(3));
/// assert_eq!(payments.max_bytes, None);
/// ```
///
/// A limit left unset is the server's default (unlimited; a 2-minute duplicate window; one
/// replica). When the stream exists, the declaration adds the subjects it lacks and raises a
/// limit below the declared one; it never removes a subject nor tightens a limit, and logs a
/// warning for what it changed or left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamDeclaration {
    /// The stream's name.
    pub name: String,
    /// The subjects it stores.
    pub subjects: Vec<String>,
    /// How many servers of a cluster keep a copy (1 to 5).
    pub replicas: Option<usize>,
    /// How long a message is kept.
    pub max_age: Option<Duration>,
    /// The most bytes the stream keeps (the oldest messages go first).
    pub max_bytes: Option<u64>,
    /// The most messages the stream keeps (the oldest go first).
    pub max_messages: Option<u64>,
    /// How long a `Nats-Msg-Id` is remembered to drop a duplicate publish.
    pub duplicate_window: Option<Duration>,
}

impl StreamDeclaration {
    /// Stream `name` storing `subjects`, with the server's default limits.
    pub fn new<I, S>(name: impl Into<String>, subjects: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            name: name.into(),
            subjects: subjects.into_iter().map(Into::into).collect(),
            replicas: None,
            max_age: None,
            max_bytes: None,
            max_messages: None,
            duplicate_window: None,
        }
    }

    /// Kept on `replicas` servers of a cluster (1 to 5; one by default).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Messages older than `max_age` are removed.
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }

    /// At most `max_bytes` bytes kept; the oldest messages make room.
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = Some(max_bytes);
        self
    }

    /// At most `max_messages` messages kept; the oldest make room.
    pub fn max_messages(mut self, max_messages: u64) -> Self {
        self.max_messages = Some(max_messages);
        self
    }

    /// A `Nats-Msg-Id` is remembered for `window` (two minutes by default).
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = Some(window);
        self
    }

    /// The name and subjects.
    pub fn spec(&self) -> StreamSpec {
        StreamSpec {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
        }
    }

    /// Whether it asks for anything besides the name and subjects.
    pub fn has_limits(&self) -> bool {
        self.limits() != Limits::default()
    }

    /// What is wrong with the declared limits, one sentence each.
    pub(crate) fn problems(&self) -> Vec<String> {
        let name = &self.name;
        let mut problems = Vec::new();
        if let Some(replicas) = self.replicas
            && !(1..=5).contains(&replicas)
        {
            problems.push(format!(
                "the declared stream `{name}` asks for {replicas} replicas; a stream has 1 to 5"
            ));
        }
        let zero = |what: &str| {
            format!(
                "the declared stream `{name}` has a {what} of zero; leave it unset for the server's default"
            )
        };
        if self.max_age == Some(Duration::ZERO) {
            problems.push(zero("max_age"));
        }
        if self.max_bytes == Some(0) {
            problems.push(zero("max_bytes"));
        }
        if self.max_messages == Some(0) {
            problems.push(zero("max_messages"));
        }
        if self.duplicate_window == Some(Duration::ZERO) {
            problems.push(zero("duplicate_window"));
        }
        problems
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            replicas: self.replicas.map(|r| u64::try_from(r).unwrap_or(u64::MAX)),
            max_age: self.max_age,
            max_bytes: self.max_bytes,
            max_messages: self.max_messages,
            duplicate_window: self.duplicate_window,
        }
    }
}

impl From<StreamSpec> for StreamDeclaration {
    fn from(spec: StreamSpec) -> Self {
        Self::new(spec.name, spec.subjects)
    }
}

/// What declaring a stream changed on a stream that already existed (nothing when it was
/// created or already as declared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamChanges {
    /// The subjects added to the stream's.
    pub added_subjects: Vec<String>,
    /// The limits raised, as `max_age 60s (was 10s)`.
    pub raised: Vec<String>,
    /// The declared limits left as they are because they would tighten the stream's, as
    /// `max_messages 10 (stays 100)`.
    pub kept: Vec<String>,
}

impl StreamChanges {
    /// Whether the existing stream was changed.
    pub fn changed(&self) -> bool {
        !self.added_subjects.is_empty() || !self.raised.is_empty()
    }
}

/// A stream's limits as numbers where more is looser. For a stream, `None` is unlimited; for a
/// declaration, not asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) replicas: Option<u64>,
    pub(crate) max_age: Option<Duration>,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) max_messages: Option<u64>,
    pub(crate) duplicate_window: Option<Duration>,
}

/// Adds to `existing` the declared subjects it does not store yet, in order; returns those
/// added. A declared subject that an existing one covers adds nothing; one that covers existing
/// subjects takes their place (a server refuses overlapping subjects), so every subject stored
/// before is stored after.
pub(crate) fn add_subjects(existing: &mut Vec<String>, declared: &[String]) -> Vec<String> {
    let mut added = Vec::new();
    for subject in declared {
        if existing.iter().any(|e| covers(e, subject)) {
            continue;
        }
        existing.retain(|e| !covers(subject, e));
        existing.push(subject.clone());
        added.push(subject.clone());
    }
    added
}

/// Whether every subject pattern `b` matches, pattern `a` matches too.
fn covers(a: &str, b: &str) -> bool {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        match (a.next(), b.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(token)) if token != ">" => {}
            (Some(x), Some(y)) if x == y => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

impl Limits {
    /// Raises each of `self` (a stream's) below the declared one to it, and says in `changes`
    /// what was raised and what was kept because the declaration would tighten it.
    pub(crate) fn raise_to(&mut self, declared: &Limits, changes: &mut StreamChanges) {
        fn one<T: Ord + Copy>(
            what: &str,
            current: &mut Option<T>,
            declared: Option<T>,
            show: impl Fn(T) -> String,
            changes: &mut StreamChanges,
        ) {
            let Some(wanted) = declared else { return };
            match *current {
                Some(now) if now < wanted => {
                    changes
                        .raised
                        .push(format!("{what} {} (was {})", show(wanted), show(now)));
                    *current = Some(wanted);
                }
                Some(now) if now > wanted => {
                    changes
                        .kept
                        .push(format!("{what} {} (stays {})", show(wanted), show(now)))
                }
                None => changes
                    .kept
                    .push(format!("{what} {} (stays unlimited)", show(wanted))),
                Some(_) => {}
            }
        }
        let secs = |d: Duration| format!("{d:?}");
        let num = |n: u64| n.to_string();
        one(
            "replicas",
            &mut self.replicas,
            declared.replicas,
            num,
            changes,
        );
        one(
            "max_age",
            &mut self.max_age,
            declared.max_age,
            secs,
            changes,
        );
        one(
            "max_bytes",
            &mut self.max_bytes,
            declared.max_bytes,
            num,
            changes,
        );
        one(
            "max_messages",
            &mut self.max_messages,
            declared.max_messages,
            num,
            changes,
        );
        one(
            "duplicate_window",
            &mut self.duplicate_window,
            declared.duplicate_window,
            secs,
            changes,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_added_never_removed() {
        let mut subjects = vec!["a.>".to_owned(), "b.>".to_owned()];
        let added = add_subjects(&mut subjects, &["b.>".to_owned(), "c.>".to_owned()]);
        assert_eq!(added, ["c.>"]);
        assert_eq!(subjects, ["a.>", "b.>", "c.>"]);

        // A wider declared subject takes the place of those it covers; a narrower one adds
        // nothing.
        let mut subjects = vec![
            "s.readings".to_owned(),
            "s.alerts.*".to_owned(),
            "t".to_owned(),
        ];
        let added = add_subjects(&mut subjects, &["s.>".to_owned(), "t".to_owned()]);
        assert_eq!(added, ["s.>"]);
        assert_eq!(subjects, ["t", "s.>"]);
        let added = add_subjects(&mut subjects, &["s.x.y".to_owned(), "s.*".to_owned()]);
        assert!(added.is_empty(), "{added:?}");
        assert_eq!(subjects, ["t", "s.>"]);
    }

    #[test]
    fn covering_is_about_every_subject() {
        assert!(covers("a.>", "a.b.c"));
        assert!(covers("a.>", "a.*"));
        assert!(covers("a.*", "a.b"));
        assert!(!covers("a.*", "a.>"));
        assert!(!covers("a.>", "a"));
        assert!(!covers("a.b", "a.*"));
        assert!(covers("a.b", "a.b"));
    }

    #[test]
    fn limits_are_raised_never_tightened() {
        let mut stream = Limits {
            replicas: Some(1),
            max_age: Some(Duration::from_secs(10)),
            max_bytes: None,
            max_messages: Some(100),
            duplicate_window: Some(Duration::from_secs(120)),
        };
        let declared = StreamDeclaration::new("S", ["s"])
            .replicas(3)
            .max_age(Duration::from_secs(60))
            .max_bytes(1024)
            .max_messages(10)
            .limits();
        let mut changes = StreamChanges::default();
        stream.raise_to(&declared, &mut changes);
        assert_eq!(stream.replicas, Some(3));
        assert_eq!(stream.max_age, Some(Duration::from_secs(60)));
        assert_eq!(stream.max_bytes, None, "unlimited stays unlimited");
        assert_eq!(stream.max_messages, Some(100), "never tightened");
        assert_eq!(
            stream.duplicate_window,
            Some(Duration::from_secs(120)),
            "not asked"
        );
        assert_eq!(
            changes.raised,
            ["replicas 3 (was 1)", "max_age 60s (was 10s)"]
        );
        assert_eq!(
            changes.kept,
            [
                "max_bytes 1024 (stays unlimited)",
                "max_messages 10 (stays 100)"
            ]
        );
    }

    #[test]
    fn zero_and_out_of_range_limits_are_problems() {
        let d = StreamDeclaration::new("S", ["s"])
            .replicas(7)
            .max_messages(0);
        assert_eq!(d.problems().len(), 2, "{:?}", d.problems());
        assert!(StreamDeclaration::new("S", ["s"]).problems().is_empty());
        assert!(!StreamDeclaration::new("S", ["s"]).has_limits());
    }
}
