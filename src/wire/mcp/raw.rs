//! Reading JSON text without building its tree: members picked out as raw text borrowed
//! from the message, small values parsed one at a time.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::MAX_ARGUMENT_VALUES;

/// Check that `text` is one JSON value a `Value` would take (syntax, number ranges and
/// the parser's nesting limit), allocating nothing.
pub(super) fn validate(text: &str) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    Skip.deserialize(&mut de)?;
    de.end()
}

/// The members `names` of the object `text` (last one wins, as in a `Value`), or
/// `None` when `text` is not an object. `text` must already be valid JSON.
pub(super) fn members<'a, const N: usize>(
    text: &'a str,
    names: &[&str; N],
) -> Option<[Option<&'a RawValue>; N]> {
    let found = pick(text, names)?;
    Some(std::array::from_fn(|i| found[i]))
}

/// Most members [`members`] picks at once (the envelope's).
const MAX_PICKED: usize = super::TOP_MEMBERS.len();

/// [`members`] without a copy per `N` of the visitor and the parser under it.
fn pick<'a>(text: &'a str, names: &[&str]) -> Option<[Option<&'a RawValue>; MAX_PICKED]> {
    assert!(names.len() <= MAX_PICKED);
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_any(Pick(names)).ok().flatten()
}

/// A raw value parsed as a `Value` if it is a scalar; a container becomes an empty one
/// of its kind, which is all the envelope's checks need to know of it.
pub(super) fn shallow(raw: &RawValue) -> Value {
    match raw.get().as_bytes().first() {
        Some(b'[') => Value::Array(Vec::new()),
        Some(b'{') => Value::Object(Map::new()),
        _ => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
    }
}

/// A `tools/call`'s `arguments` object as a `Value`, refused past
/// `MAX_ARGUMENT_VALUES` values before any of it is built.
pub(super) fn arguments(raw: &RawValue) -> Result<Value, String> {
    let values = count_values(raw.get());
    if values > MAX_ARGUMENT_VALUES {
        return Err(format!(
            "arguments hold {values} JSON values; at most {MAX_ARGUMENT_VALUES} are accepted"
        ));
    }
    serde_json::from_str(raw.get()).map_err(|e| format!("arguments: {e}"))
}

/// How many values valid JSON text holds, counted from above: every value but the
/// outermost follows a `[`, a `,` or a `:` outside a string (an object's `,` precede
/// names, which cost memory too; an empty array counts one). A string is skipped to its
/// closing quote with `memchr` (a `file_put` chunk is one string of a megabyte: byte by
/// byte, this pass took 0.6 ms of the grant thread per chunk, more than parsing it).
fn count_values(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut n, mut i) = (1, 0);
    while let Some(&c) = b.get(i) {
        i += 1;
        match c {
            b'"' => loop {
                let Some(k) = b
                    .get(i..)
                    .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                else {
                    return n;
                };
                if b[i + k] == b'"' {
                    i += k + 1;
                    break;
                }
                i += k + 2; // the backslash and the character it escapes
            },
            b',' | b':' | b'[' => n += 1,
            _ => {}
        }
    }
    n
}

/// Visits anything and keeps nothing, through `deserialize_any` so the parser's nesting
/// limit applies (`IgnoredAny` skips without one).
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

/// Picks the members `names` out of an object; anything else is "not an object".
struct Pick<'n>(&'n [&'n str]);

impl<'de> Visitor<'de> for Pick<'_> {
    type Value = Option<[Option<&'de RawValue>; MAX_PICKED]>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None; MAX_PICKED];
        while let Some(key) = map.next_key_seed(KeyIndex(self.0))? {
            match key {
                Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                None => map.next_value::<de::IgnoredAny>().map(drop)?,
            }
        }
        Ok(Some(found))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A member name as its index in `names` (`None` for any other name), without
/// copying it.
struct KeyIndex<'n>(&'n [&'n str]);

impl<'de> DeserializeSeed<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|n| *n == key))
    }
}

#[cfg(test)]
mod tests {
    use super::count_values;

    /// The count byte by byte, as it was before strings were skipped with `memchr`.
    fn byte_by_byte(text: &str) -> usize {
        let (mut n, mut in_string, mut escaped) = (1, false, false);
        for b in text.bytes() {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b',' | b':' | b'[' => n += 1,
                    _ => {}
                }
            }
        }
        n
    }

    #[test]
    fn values_are_counted_as_byte_by_byte_whatever_the_strings_hold() {
        let long = "QUJD".repeat(10_000);
        let cases = [
            "1".to_string(),
            "[]".into(),
            "[1,2,[3,[]]]".into(),
            r#"{"a":1,"b":[true,null],"c":{"d":"e"}}"#.into(),
            r#"{"s":"a,b:[c"}"#.into(),
            r#"{"s":"quote \" inside, and [ , :","t":1}"#.into(),
            r#"{"s":"ends in a backslash \\","t":[1,2]}"#.into(),
            r#"{"s":"\\\"\\\\\"","t":","}"#.into(),
            r#"["é, ü: [ 😀", "\u0022", 3]"#.into(),
            format!(r#"{{"path":"/x","data":"{long}","offset":0}}"#),
            format!(r#"["{long}\\", "{long}\"", 1]"#),
        ];
        for text in &cases {
            serde_json::from_str::<serde_json::Value>(text).expect(text);
            assert_eq!(count_values(text), byte_by_byte(text), "{text:.80}");
        }
        // Cut short inside a string (not valid JSON: never given, but it must not panic).
        for text in [r#"{"a":"b"#, r#"{"a":"b\"#, r#"["\"#] {
            assert_eq!(count_values(text), byte_by_byte(text), "{text}");
        }
    }
}
