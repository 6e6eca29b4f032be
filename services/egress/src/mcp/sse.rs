//! Reading a `text/event-stream` body as it arrives: bytes in, the `data` of each
//! complete event out. Lines end in `\n`, `\r\n` or `\r`; `data` lines of one event are
//! joined with `\n`; comments and the other fields are skipped. An event longer than the
//! cap is refused rather than kept growing.

/// An incremental event-stream reader.
#[derive(Debug, Default)]
pub(crate) struct SseReader {
    /// Bytes of a line not ended yet.
    line: Vec<u8>,
    /// The `data` of the event being read.
    data: Option<String>,
    /// The last byte seen was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
    /// Bytes held for the current event (its lines so far).
    held: usize,
}

/// An event larger than the reader's cap.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooLarge;

impl SseReader {
    /// Feeds `bytes`; the data of every event they complete, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8], cap: usize) -> Result<Vec<String>, TooLarge> {
        let mut events = Vec::new();
        for &b in bytes {
            if self.after_cr && b == b'\n' {
                self.after_cr = false;
                continue;
            }
            self.after_cr = b == b'\r';
            if b == b'\n' || b == b'\r' {
                let line = std::mem::take(&mut self.line);
                if let Some(data) = self.end_line(&line) {
                    events.push(data);
                }
                continue;
            }
            self.held += 1;
            if self.held > cap {
                return Err(TooLarge);
            }
            self.line.push(b);
        }
        Ok(events)
    }

    /// Handles one line; the event's data when the line is blank and ends one.
    fn end_line(&mut self, line: &[u8]) -> Option<String> {
        if line.is_empty() {
            self.held = 0;
            return self.data.take();
        }
        if line.starts_with(b":") {
            return None;
        }
        let (field, value) = match line.iter().position(|&c| c == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            let value = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<String> {
        let mut r = SseReader::default();
        chunks
            .iter()
            .flat_map(|c| r.feed(c, 1024).expect("within the cap"))
            .collect()
    }

    #[test]
    fn events_are_read_across_chunks_and_line_endings() {
        let got = all(&[
            b"event: message\r\nda",
            b"ta: {\"a\":1}\r",
            b"\n\r\n: ping\n\ndata:x\ndata: y\r\rid: 7\n",
            b"\n",
        ]);
        assert_eq!(got, vec!["{\"a\":1}".to_string(), "x\ny".to_string()]);
    }

    #[test]
    fn an_event_without_data_or_not_ended_yields_nothing() {
        assert!(all(&[b"event: x\n\n", b"data: half"]).is_empty());
    }

    #[test]
    fn an_event_over_the_cap_is_refused() {
        let mut r = SseReader::default();
        let long = vec![b'a'; 2000];
        assert_eq!(r.feed(&long, 1024), Err(TooLarge));
        let mut r = SseReader::default();
        let mut many = Vec::new();
        for _ in 0..200 {
            many.extend_from_slice(b"data: aaaaaaaaaa\n");
        }
        assert_eq!(r.feed(&many, 1024), Err(TooLarge));
    }
}
