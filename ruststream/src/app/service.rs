//! The service an app's request handlers are advertised as ([`ServiceIdentity`]): the name,
//! version and description of its [`AppInfo`], checked as the NATS service protocol wants them.

use super::info::AppInfo;
use crate::error::{Error, ErrorKind};
use crate::registration::RegistrationInfo;
use crate::settle::DeliveryModel;

/// Where the service protocol's requests go (`$SRV.PING`, `$SRV.INFO.<name>`...): the runtime
/// answers them while the app's service runs, so no registration may subscribe there then.
pub const SERVICE_SUBJECT_PREFIX: &str = "$SRV.";

/// Put into the [`Env`](crate::Env) by the app as it starts, when it has request handlers and
/// did not turn the service off (`.micro_service(false)`): the service a broker advertises
/// them as. The NATS broker answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceIdentity {
    /// The app's name as a service name ([`service_name`]).
    pub name: String,
    /// The app's version, a semantic version.
    pub version: String,
    /// The app's description, empty without one.
    pub description: String,
}

impl ServiceIdentity {
    /// The service of the app `info`: an error when its version is not a semantic version
    /// (`MAJOR.MINOR.PATCH`, as the protocol requires) or its name is empty.
    pub fn of(info: &AppInfo) -> Result<Self, Error> {
        let fix = "or turn the service off with `.micro_service(false)` on the app builder";
        if info.name().is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the app's name is empty, and its request handlers are advertised as a service named by it; give the app a name, {fix}"
                ),
            ));
        }
        if !is_semver(info.version()) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the app's version `{}` is not a semantic version (MAJOR.MINOR.PATCH, like `1.0.0`), which the NATS service protocol requires of the service its request handlers are advertised as; write the version so, {fix}",
                    info.version()
                ),
            ));
        }
        Ok(Self {
            name: service_name(info.name()),
            version: info.version().to_owned(),
            description: info.metadata().description.clone().unwrap_or_default(),
        })
    }
}

/// The service of an app with `registrations`: `None` when none of them answers requests or
/// the app turned the service off (`advertise` false); an error when the app's name or version
/// cannot name a service, or a registration subscribes under [`SERVICE_SUBJECT_PREFIX`].
pub(super) fn service_of(
    info: &AppInfo,
    advertise: bool,
    registrations: &[RegistrationInfo],
) -> Option<Result<ServiceIdentity, Error>> {
    (advertise && registrations.iter().any(is_endpoint)).then(|| {
        check_service_subjects(registrations)?;
        ServiceIdentity::of(info)
    })
}

/// `name` as a service or endpoint name of the protocol (`^[A-Za-z0-9_-]+$`): every other
/// character becomes `_` (`orders.worker` is `orders_worker`).
pub fn service_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether registration `r` is an endpoint of the app's service: a Core registration that
/// answers requests.
pub fn is_endpoint(r: &RegistrationInfo) -> bool {
    r.answers_requests && r.descriptor.model == DeliveryModel::Core
}

/// Refuses a registration under [`SERVICE_SUBJECT_PREFIX`]: the runtime answers there.
fn check_service_subjects(registrations: &[RegistrationInfo]) -> Result<(), Error> {
    match registrations
        .iter()
        .find(|r| r.descriptor.subject.starts_with(SERVICE_SUBJECT_PREFIX))
    {
        Some(r) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "registration `{}` subscribes to `{}`, where the app's service answers the NATS service protocol for its request handlers; choose another subject, or turn the service off with `.micro_service(false)` to answer there yourself",
                r.name, r.descriptor.subject
            ),
        )),
        None => Ok(()),
    }
}

/// Whether `version` is a semantic version (semver.org 2.0.0): three numbers without leading
/// zeros, an optional pre-release after `-` and build metadata after `+`.
fn is_semver(version: &str) -> bool {
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let number = |s: &str| digits(s) && (s == "0" || !s.starts_with('0'));
    let identifier =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| number(p))
        && pre.is_none_or(|pre| {
            pre.split('.')
                .all(|id| identifier(id) && (!digits(id) || number(id)))
        })
        && build.is_none_or(|build| build.split('.').all(identifier))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_semantic_versions() {
        for good in [
            "0.1.0",
            "1.0.0",
            "10.20.30",
            "1.0.0-alpha.1",
            "1.0.0-rc-1+build.5",
            "1.2.3+x",
        ] {
            assert!(is_semver(good), "{good}");
        }
        for bad in [
            "",
            "1",
            "1.0",
            "01.0.0",
            "1.0.0-",
            "1.0.0-01",
            "1.0.0+",
            "1.0.0.0",
            "v1.0.0",
            "1.0.0-a..b",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn names_keep_letters_digits_dash_and_underscore() {
        assert_eq!(service_name("orders-worker_2"), "orders-worker_2");
        assert_eq!(service_name("orders.worker v2"), "orders_worker_v2");
    }

    #[test]
    fn a_bad_version_names_the_fix() {
        let err = ServiceIdentity::of(&AppInfo::new("math", "1.0")).expect_err("not semver");
        assert!(err.to_string().contains("`1.0`"), "{err}");
        assert!(err.to_string().contains(".micro_service(false)"), "{err}");
        let ok = ServiceIdentity::of(&AppInfo::new("my.math", "1.0.0").description("sums"))
            .expect("valid");
        assert_eq!(
            (ok.name.as_str(), ok.description.as_str()),
            ("my_math", "sums")
        );
    }
}
