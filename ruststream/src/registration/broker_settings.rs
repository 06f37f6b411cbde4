//! [`BrokerSettings`]: a broker's own settings of a descriptor, which the core carries but never
//! reads (a NATS consumer's deliver policy, say), so that a broker option touches only its crate.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

/// Typed settings a broker's descriptor attaches to its [`DescriptorInfo`](super::DescriptorInfo),
/// read by the same broker at startup, by type. Two compare equal when they hold equal values
/// of the same types.
#[derive(Default, Clone)]
pub struct BrokerSettings {
    // One or two entries per descriptor: a list searched in order is enough.
    entries: Vec<Setting>,
}

// Shared, so that cloning a descriptor's facts does not clone its settings; the functions
// compare and print a value without knowing its type.
#[derive(Clone)]
struct Setting {
    id: TypeId,
    value: Arc<dyn Any + Send + Sync>,
    eq: fn(&dyn Any, &dyn Any) -> bool,
    debug: fn(&dyn Any, &mut fmt::Formatter<'_>) -> fmt::Result,
}

fn eq_as<T: PartialEq + 'static>(a: &dyn Any, b: &dyn Any) -> bool {
    match (a.downcast_ref::<T>(), b.downcast_ref::<T>()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn debug_as<T: fmt::Debug + 'static>(value: &dyn Any, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match value.downcast_ref::<T>() {
        Some(value) => value.fmt(f),
        None => f.write_str("?"),
    }
}

impl BrokerSettings {
    /// No settings.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Stores `value`, replacing one of the same type.
    pub fn insert<T: Send + Sync + Eq + fmt::Debug + 'static>(&mut self, value: T) {
        let setting = Setting {
            id: TypeId::of::<T>(),
            value: Arc::new(value),
            eq: eq_as::<T>,
            debug: debug_as::<T>,
        };
        match self.entries.iter_mut().find(|s| s.id == setting.id) {
            Some(slot) => *slot = setting,
            None => self.entries.push(setting),
        }
    }

    /// The stored value of type `T`.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.value.downcast_ref())
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl PartialEq for BrokerSettings {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len()
            && self.entries.iter().all(|s| {
                other
                    .entries
                    .iter()
                    .find(|o| o.id == s.id)
                    .is_some_and(|o| (s.eq)(&*s.value, &*o.value))
            })
    }
}

// Every stored type is `Eq`, which `insert` requires.
impl Eq for BrokerSettings {}

impl fmt::Debug for BrokerSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Value<'a>(&'a Setting);
        impl fmt::Debug for Value<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                (self.0.debug)(&*self.0.value, f)
            }
        }
        f.debug_list()
            .entries(self.entries.iter().map(Value))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::BrokerSettings;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Limit(u32);

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Name(&'static str);

    #[test]
    fn a_setting_is_read_back_by_type_and_replaced_by_one_of_the_same_type() {
        let mut settings = BrokerSettings::new();
        assert!(settings.get::<Limit>().is_none());
        settings.insert(Limit(1));
        settings.insert(Name("a"));
        settings.insert(Limit(2));
        assert_eq!(settings.get::<Limit>(), Some(&Limit(2)));
        assert_eq!(settings.get::<Name>(), Some(&Name("a")));
        assert_eq!(format!("{settings:?}"), "[Limit(2), Name(\"a\")]");
    }

    #[test]
    fn settings_compare_by_content_whatever_the_order() {
        let mut a = BrokerSettings::new();
        a.insert(Limit(1));
        a.insert(Name("a"));
        let mut b = BrokerSettings::new();
        b.insert(Name("a"));
        b.insert(Limit(1));
        assert_eq!(a, b);
        assert_eq!(a.clone(), a);
        b.insert(Limit(2));
        assert_ne!(a, b);
        assert_ne!(a, BrokerSettings::new());
    }
}
