//! The known differences between the servers the differential test compares: each named, with
//! the servers it applies to, and what it blanks out of an observation line before the two
//! logs are compared. docs/testing.md ("The differential test") has each one's minimal case.
//! The in-process NATS follows the current 2.x server; what an older server does otherwise is
//! here.

/// A nats-server's version, as `nats-server --version` prints it (`nats-server: v2.9.10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// Reads `nats-server: v2.9.10`.
    pub fn parse(text: &str) -> Self {
        let numbers: Vec<u64> = text
            .rsplit('v')
            .next()
            .unwrap_or_default()
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let at = |i: usize| numbers.get(i).copied().unwrap_or(0);
        Self(at(0), at(1), at(2))
    }
}

/// A difference the comparison allows.
pub struct Known {
    /// Its name, as docs/testing.md lists it.
    pub name: &'static str,
    /// Whether the real server of this version behaves so.
    pub applies: fn(Version) -> bool,
    /// An observation line with the differing part blanked out (the same line when it has
    /// none), given the operation lines so far (the last one is the line's own).
    pub blank: fn(&[String], &str) -> String,
}

/// Every known difference.
pub const KNOWN: &[Known] = &[
    Known {
        name: "filtered-cursor-skips-to-end (nats-server 2.9)",
        applies: |v| v < Version(2, 10, 0),
        blank: |_, line| blank_filtered_stream_positions(line),
    },
    Known {
        name: "duplicate-before-expected-last-sequence (nats-server 2.9)",
        applies: |v| v < Version(2, 10, 0),
        blank: |ops, line| blank_duplicate_or_refusal(ops.last().map_or("", String::as_str), line),
    },
    Known {
        name: "num-pending-after-consumer-update (nats-server 2.9)",
        applies: |v| v < Version(2, 10, 0),
        blank: blank_pending_after_update,
    },
];

/// nats-server 2.9 can count a message published after a durable consumer was created over
/// itself (an update with the same configuration) twice in its `num_pending`, for a while:
/// seen once in 2 000 cases, and not again while that case shrank. Blanks the pending
/// count (in `consumer info` and in the acknowledgement subjects of its fetches) of a consumer
/// created during the case.
pub fn blank_pending_after_update(ops: &[String], line: &str) -> String {
    for consumer in ["all", "a"] {
        let created = ops
            .iter()
            .any(|op| op.ends_with(&format!(". create consumer {consumer}")));
        let info = line
            .trim_start()
            .starts_with(&format!("{consumer}: delivered="));
        let fetch = ops
            .last()
            .is_some_and(|op| op.contains(&format!(". fetch {consumer} ")))
            && line.contains(" delivered=")
            && line.trim_start().starts_with("-> ");
        if created && (info || fetch) {
            return match line.split_once(" pending=") {
                Some((before, after)) => {
                    let rest = after.split_once(' ').map_or("", |(_, r)| r);
                    let sep = if rest.is_empty() { "" } else { " " };
                    format!("{before} pending=*{sep}{rest}")
                }
                None => line.to_owned(),
            };
        }
    }
    line.to_owned()
}

/// nats-server 2.9 looks for a duplicate before it checks `Nats-Expected-Last-Sequence`, so a
/// repeated message id with a wrong expected sequence is acknowledged as the duplicate; the
/// current server (and the in-process NATS) refuse it. Nothing is stored either way. Blanks
/// the answer to a publish with both a message id and an expected last sequence.
pub fn blank_duplicate_or_refusal(op: &str, line: &str) -> String {
    let answer = line.trim_start();
    let publish =
        op.contains(". publish ") && op.contains(" id=") && op.contains("expect-last-seq=");
    let either = answer.ends_with("(duplicate)") || answer == "-> refused: Expectation";
    if publish && either {
        "    -> (a duplicate, or refused: the servers differ)".to_owned()
    } else {
        line.to_owned()
    }
}

/// nats-server 2.9 moves a filtered consumer's cursor to the stream's last sequence when a pull
/// with room left finds no further message of its filter, so `delivered.stream_seq` (and the
/// ack floor's stream sequence, which follows it once nothing waits) name a message the
/// consumer never delivered; 2.10 and later (and the in-process NATS) stay at the last
/// delivered one. Blanks both stream sequences of consumer `a` (the filtered one).
pub fn blank_filtered_stream_positions(line: &str) -> String {
    let Some(rest) = line.trim_start().strip_prefix("a: delivered=(") else {
        return line.to_owned();
    };
    let indent = &line[..line.len() - line.trim_start().len()];
    let mut out = format!("{indent}a: delivered=(");
    let (dseq, rest) = rest.split_once(", ").unwrap_or((rest, ""));
    out.push_str(dseq);
    out.push_str(", *)");
    let rest = rest.split_once(')').map_or("", |(_, r)| r);
    let (before, floor) = rest.split_once("ack_floor=(").unwrap_or((rest, ""));
    out.push_str(before);
    if !floor.is_empty() {
        let (fdseq, _) = floor.split_once(", ").unwrap_or((floor, ""));
        out.push_str(&format!("ack_floor=({fdseq}, *)"));
    }
    out
}

/// `log` with every known difference of `version` blanked out, and the names of those that
/// changed a line (to print with a run, so that none goes unnoticed).
pub fn normalise(version: Version, log: &[String]) -> (Vec<String>, Vec<&'static str>) {
    let mut used = Vec::new();
    let mut ops: Vec<String> = Vec::new();
    let out = log
        .iter()
        .map(|line| {
            if !line.starts_with("    ") {
                ops.push(line.clone());
                return line.clone();
            }
            let mut line = line.clone();
            for known in KNOWN.iter().filter(|k| (k.applies)(version)) {
                let blanked = (known.blank)(&ops, &line);
                if blanked != line && !used.contains(&known.name) {
                    used.push(known.name);
                }
                line = blanked;
            }
            line
        })
        .collect();
    (out, used)
}
