//! The messages the echo clients send: 1 KiB JSON-like texts, the same as ws_bench.py's
//! Python clients send, so that compression sees the same data from either client.

/// How many different messages each client cycles through: 64 KiB of them, more than the
/// largest deflate window, so that no message compresses against its own earlier copy.
pub const PER_CLIENT: usize = 64;
pub const SIZE: usize = 1024;

/// Message `seq`: 16 rows of a feed, padded with spaces or cut to `SIZE` bytes.
pub fn json_like(seq: usize) -> String {
    let rows: Vec<String> = (0..16)
        .map(|i| {
            format!(
                r#"{{"id":{},"user":"user-{}","score":{:?},"online":{}}}"#,
                seq * 100 + i,
                (seq * 7 + i) % 997,
                (seq + i) as f64 * 3.25,
                if (seq + i) % 3 != 0 { "true" } else { "false" },
            )
        })
        .collect();
    let mut text = format!(r#"{{"seq":{seq},"rows":[{}]}}"#, rows.join(","));
    text.truncate(SIZE);
    while text.len() < SIZE {
        text.push(' ');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_python_clients_messages() {
        let text = json_like(3);
        assert_eq!(text.len(), SIZE);
        assert!(text.starts_with(
            r#"{"seq":3,"rows":[{"id":300,"user":"user-21","score":9.75,"online":false},"#
        ));
    }
}
