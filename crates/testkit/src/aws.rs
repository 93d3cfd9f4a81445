//! AWS test support for the `bedrock-converse-stream` upstream: frames of
//! `application/vnd.amazon.eventstream` as Bedrock sends them
//! ([`encode_event`], [`encode_exception`], [`encode_message`]), and a
//! SigV4 verifier ([`verify_sigv4`]) for a fake Bedrock server.
//!
//! Both are written here, independently of the gateway's code: the
//! gateway signs with AWS's `aws-sigv4` crate and decodes frames with its
//! own decoder and `crc32fast`; this file hashes with `ring` and computes
//! CRCs with its own table, so each side checks the other. The verifier is
//! tested against AWS's published SigV4 test suite (below).
//!
//! What the verifier checks, as AWS does: the `Authorization` header's
//! form, its credential scope (date, region, service), that `host`,
//! `x-amz-date` and any `x-amz-security-token` are signed and every signed
//! header is present, and the signature over the canonical request
//! rebuilt from the request as received (the path double-encoded, as for
//! every service but S3; no dot-segment normalisation). It does not check
//! the clock or the access key id: a fake server knows its one secret.

use ring::{digest, hmac};

/// One event-stream message with string headers, in order, and `payload`:
/// the prelude, both CRCs (IEEE CRC-32 by this file's own table).
///
/// # Panics
///
/// On a header name over 255 bytes or a value over 65,535 (test input).
pub fn encode_message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        let name_len = u8::try_from(name.len()).expect("header name over 255 bytes");
        let value_len = u16::try_from(value.len()).expect("header value over 65,535 bytes");
        block.push(name_len);
        block.extend_from_slice(name.as_bytes());
        block.push(7);
        block.extend_from_slice(&value_len.to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + block.len() + payload.len()).expect("message over 4 GiB");
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&block);
    out.extend_from_slice(payload);
    let message_crc = crc32(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// A Bedrock stream event: `:message-type: event`, `:event-type`,
/// `:content-type: application/json`, then the payload (the member's JSON,
/// e.g. `{"contentBlockIndex":0,"delta":{"text":"Hi"}}` for
/// `contentBlockDelta`).
pub fn encode_event(event_type: &str, payload: &[u8]) -> Vec<u8> {
    encode_message(
        &[
            (":message-type", "event"),
            (":event-type", event_type),
            (":content-type", "application/json"),
        ],
        payload,
    )
}

/// A Bedrock in-stream exception: `:exception-type` (lower camel case, as
/// Bedrock names them: `throttlingException`), `:content-type`,
/// `:message-type: exception`, then the payload (`{"message":"…"}`).
pub fn encode_exception(exception_type: &str, payload: &[u8]) -> Vec<u8> {
    encode_message(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload,
    )
}

/// CRC-32 (IEEE, reflected 0xEDB88320), by table.
fn crc32(bytes: &[u8]) -> u32 {
    const fn table() -> [u32; 256] {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    }
    static TABLE: [u32; 256] = table();
    !bytes.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Checks a request's AWS SigV4 `Authorization` header: `Ok` when it was
/// signed with `secret_access_key` for `region` and `service`, over this
/// method, path and query (as sent on the wire), these headers and this
/// body; else what is wrong (never the secret). `headers` are as received
/// (any case, repeated names allowed).
pub fn verify_sigv4(
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: &[u8],
    secret_access_key: &str,
    region: &str,
    service: &str,
) -> Result<(), String> {
    let auth = single(headers, "authorization")?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("authorization is not AWS4-HMAC-SHA256")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (k, v) = part
            .trim()
            .split_once('=')
            .ok_or("authorization has a part without `=`")?;
        let slot = match k {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut signature,
            _ => return Err(format!("authorization has an unknown part `{k}`")),
        };
        if slot.replace(v).is_some() {
            return Err(format!("authorization repeats `{k}`"));
        }
    }
    let credential = credential.ok_or("authorization has no Credential")?;
    let signed = signed.ok_or("authorization has no SignedHeaders")?;
    let signature = signature.ok_or("authorization has no Signature")?;

    let scope: Vec<&str> = credential.split('/').collect();
    let [_key_id, date, scope_region, scope_service, terminator] = scope[..] else {
        return Err("credential is not key/date/region/service/aws4_request".into());
    };
    if terminator != "aws4_request" {
        return Err("credential scope does not end in aws4_request".into());
    }
    if scope_region != region {
        return Err(format!(
            "signed for region `{scope_region}`, expected `{region}`"
        ));
    }
    if scope_service != service {
        return Err(format!(
            "signed for service `{scope_service}`, expected `{service}`"
        ));
    }
    let amz_date = single(headers, "x-amz-date")?;
    let well_formed = amz_date.len() == 16
        && amz_date.bytes().enumerate().all(|(i, b)| match i {
            8 => b == b'T',
            15 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    if !well_formed {
        return Err("x-amz-date is not YYYYMMDDTHHMMSSZ".into());
    }
    if &amz_date[..8] != date {
        return Err("the credential scope's date is not x-amz-date's".into());
    }

    let names: Vec<&str> = signed.split(';').collect();
    if names
        .iter()
        .any(|n| n.is_empty() || *n != n.to_ascii_lowercase())
    {
        return Err("SignedHeaders must be lower-case names".into());
    }
    if names.windows(2).any(|w| w[0] >= w[1]) {
        return Err("SignedHeaders must be sorted, without repeats".into());
    }
    for required in ["host", "x-amz-date"] {
        if !names.contains(&required) {
            return Err(format!("`{required}` is not signed"));
        }
    }
    if has(headers, "x-amz-security-token") && !names.contains(&"x-amz-security-token") {
        return Err("`x-amz-security-token` is sent but not signed".into());
    }
    if names.contains(&"authorization") {
        return Err("`authorization` cannot be signed".into());
    }
    let creq = canonical_request(method, path_and_query, headers, &names, body)?;
    let sts = string_to_sign(amz_date, region, service, &creq);
    let expected = signature_of(secret_access_key, date, region, service, &sts);
    if signature.len() == 64 && constant_time_eq(signature.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err("signature does not match the request".into())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn values<'a>(headers: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn has(headers: &[(String, String)], name: &str) -> bool {
    values(headers, name).next().is_some()
}

fn single<'a>(headers: &'a [(String, String)], name: &'a str) -> Result<&'a str, String> {
    let mut it = values(headers, name);
    match (it.next(), it.next()) {
        (Some(v), None) => Ok(v.trim()),
        (None, _) => Err(format!("no `{name}` header")),
        (Some(_), Some(_)) => Err(format!("more than one `{name}` header")),
    }
}

/// Lower-case hex of bytes.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lower-case hex SHA-256.
fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

/// AWS's URI encoding: every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`
/// (upper-case hex); `/` kept when `keep_slash`.
fn uri_encode(bytes: &[u8], keep_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `%XX` decoded, `+` as a space (what `aws-sigv4` reads a query as).
fn query_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hexval = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hexval(b[i + 1]), hexval(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// The SigV4 canonical request of a request as received: the method, the
/// path double-encoded (each byte of the wire path outside the unreserved
/// set and `/`, `%` included, percent-encoded again), the query's pairs
/// decoded, re-encoded and sorted, the `signed` headers (lower-case names,
/// sorted) with their values trimmed, inner runs of spaces collapsed and
/// repeats joined by `,`, the signed names, and the payload hash
/// (`x-amz-content-sha256` when sent, which must then match the body or be
/// `UNSIGNED-PAYLOAD`; else the body's SHA-256).
pub fn canonical_request(
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    signed: &[&str],
    body: &[u8],
) -> Result<String, String> {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let path = if path.is_empty() { "/" } else { path };
    let canonical_uri = uri_encode(path.as_bytes(), true);
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&query_decode(k), false),
                uri_encode(&query_decode(v), false),
            )
        })
        .collect();
    pairs.sort();
    let canonical_query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in signed {
        let vals: Vec<String> = values(headers, name)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if vals.is_empty() {
            return Err(format!("signed header `{name}` is not in the request"));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", vals.join(",")));
    }
    let body_hash = sha256_hex(body);
    let payload_hash = match values(headers, "x-amz-content-sha256").next() {
        Some(v) if v.trim() == body_hash || v.trim() == "UNSIGNED-PAYLOAD" => v.trim().to_string(),
        Some(_) => return Err("x-amz-content-sha256 is not the body's hash".into()),
        None => body_hash,
    };
    Ok(format!(
        "{method}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{}\n{payload_hash}",
        signed.join(";")
    ))
}

/// The SigV4 string to sign of a canonical request signed at `amz_date`
/// (`YYYYMMDDTHHMMSSZ`).
pub fn string_to_sign(
    amz_date: &str,
    region: &str,
    service: &str,
    canonical_request: &str,
) -> String {
    let date = amz_date.get(..8).unwrap_or(amz_date);
    format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        sha256_hex(canonical_request.as_bytes())
    )
}

/// The SigV4 signature (lower-case hex) of a string to sign: HMAC-SHA256
/// under the key derived from the secret, the date (`YYYYMMDD`), the
/// region and the service.
pub fn signature_of(
    secret_access_key: &str,
    date: &str,
    region: &str,
    service: &str,
    string_to_sign: &str,
) -> String {
    let mac = |key: &[u8], data: &[u8]| -> Vec<u8> {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
            .as_ref()
            .to_vec()
    };
    let k_date = mac(
        format!("AWS4{secret_access_key}").as_bytes(),
        date.as_bytes(),
    );
    let k_region = mac(&k_date, region.as_bytes());
    let k_service = mac(&k_region, service.as_bytes());
    let k_signing = mac(&k_service, b"aws4_request");
    hex(&mac(&k_signing, string_to_sign.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The credentials, region and service of AWS's SigV4 test suite
    /// (`aws-signing-test-suite/v4/*/context.json`, as shipped in the
    /// `aws-sigv4` 1.6.6 crate; the suite's timestamp is
    /// 2015-08-30T12:36:00Z).
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const AMZ_DATE: &str = "20150830T123600Z";

    struct Vector {
        name: &'static str,
        method: &'static str,
        path: &'static str,
        /// The request's headers (request.txt), x-amz-date and any token
        /// included.
        headers: &'static [(&'static str, &'static str)],
        body: &'static [u8],
        signed: &'static str,
        canonical_request: &'static str,
        string_to_sign: &'static str,
        signature: &'static str,
    }

    const HOST: (&str, &str) = ("Host", "example.amazonaws.com");
    const DATE: (&str, &str) = ("X-Amz-Date", AMZ_DATE);

    /// Expected values copied from the suite's `header-canonical-request.txt`,
    /// `header-string-to-sign.txt` and `header-signature.txt`.
    const VECTORS: &[Vector] = &[
        Vector {
            name: "get-vanilla",
            method: "GET",
            path: "/",
            headers: &[HOST, DATE],
            body: b"",
            signed: "host;x-amz-date",
            canonical_request: "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
            signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        Vector {
            name: "post-vanilla",
            method: "POST",
            path: "/",
            headers: &[HOST, DATE],
            body: b"",
            signed: "host;x-amz-date",
            canonical_request: "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
            signature: "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        },
        Vector {
            name: "post-header-key-sort",
            method: "POST",
            path: "/",
            headers: &[HOST, ("My-Header1", "value1"), DATE],
            body: b"",
            signed: "host;my-header1;x-amz-date",
            canonical_request: "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
            signature: "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
        },
        Vector {
            name: "get-vanilla-with-session-token",
            method: "GET",
            path: "/",
            headers: &[
                HOST,
                ("X-Amz-Security-Token", "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"),
                DATE,
            ],
            body: b"",
            signed: "host;x-amz-date;x-amz-security-token",
            canonical_request: "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n\nhost;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
            signature: "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
        },
        Vector {
            name: "get-header-value-trim",
            method: "GET",
            path: "/",
            headers: &[HOST, ("My-Header1", " value1"), ("My-Header2", " \"a   b   c\""), DATE],
            body: b"",
            signed: "host;my-header1;my-header2;x-amz-date",
            canonical_request: "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\na726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
            signature: "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
        },
        Vector {
            name: "get-header-key-duplicate",
            method: "GET",
            path: "/",
            headers: &[
                HOST,
                ("My-Header1", "value2"),
                ("My-Header1", "value2"),
                ("My-Header1", "value1"),
                DATE,
            ],
            body: b"",
            signed: "host;my-header1;x-amz-date",
            canonical_request: "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\ndc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
            signature: "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
        },
        Vector {
            name: "get-vanilla-query-order-key-case",
            method: "GET",
            path: "/?Param2=value2&Param1=value1",
            headers: &[HOST, DATE],
            body: b"",
            signed: "host;x-amz-date",
            canonical_request: "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
            signature: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        },
        Vector {
            name: "post-x-www-form-urlencoded",
            method: "POST",
            path: "/",
            headers: &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                HOST,
                ("Content-Length", "13"),
                ("X-Amz-Content-Sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"),
                DATE,
            ],
            body: b"Param1=value1",
            signed: "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
            canonical_request: "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\nx-amz-date:20150830T123600Z\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
            string_to_sign: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nb1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
            signature: "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b",
        },
    ];

    fn owned(h: &[(&str, &str)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn signed_request(v: &Vector) -> Vec<(String, String)> {
        let mut h = owned(v.headers);
        h.push((
            "Authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders={}, Signature={}",
                v.signed, v.signature
            ),
        ));
        h
    }

    #[test]
    fn published_vectors_step_by_step() {
        for v in VECTORS {
            let names: Vec<&str> = v.signed.split(';').collect();
            let creq =
                canonical_request(v.method, v.path, &owned(v.headers), &names, v.body).unwrap();
            assert_eq!(creq, v.canonical_request, "{}", v.name);
            let sts = string_to_sign(AMZ_DATE, "us-east-1", "service", &creq);
            assert_eq!(sts, v.string_to_sign, "{}", v.name);
            assert_eq!(
                signature_of(SECRET, "20150830", "us-east-1", "service", &sts),
                v.signature,
                "{}",
                v.name
            );
        }
    }

    #[test]
    fn published_signed_requests_verify() {
        for v in VECTORS {
            verify_sigv4(
                v.method,
                v.path,
                &signed_request(v),
                v.body,
                SECRET,
                "us-east-1",
                "service",
            )
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        }
    }

    // The suite's double-encode-path canonical request (its other files do
    // not agree on a date, so only the canonical URI is checked).
    #[test]
    fn double_encoded_path() {
        let h = owned(&[
            ("Host", "tj9n5r0m12.execute-api.us-east-1.amazonaws.com"),
            ("X-Amz-Date", "20210511T154045Z"),
        ]);
        let creq = canonical_request(
            "POST",
            "/test/@connections/JBDvjfGEIAMCERw%3D",
            &h,
            &["host", "x-amz-date"],
            b"",
        )
        .unwrap();
        assert_eq!(
            creq,
            "POST\n/test/%40connections/JBDvjfGEIAMCERw%253D\n\nhost:tj9n5r0m12.execute-api.us-east-1.amazonaws.com\nx-amz-date:20210511T154045Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn tampering_fails() {
        let v = &VECTORS[7];
        let ok = || signed_request(v);
        let run =
            |h: &[(String, String)], body: &[u8], secret: &str, region: &str, service: &str| {
                verify_sigv4(v.method, v.path, h, body, secret, region, service)
            };
        run(&ok(), v.body, SECRET, "us-east-1", "service").unwrap();
        // The body (its hash header then no longer matches).
        assert!(run(&ok(), b"Param1=value2", SECRET, "us-east-1", "service").is_err());
        // The secret, the region, the service.
        assert_eq!(
            run(
                &ok(),
                v.body,
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEz",
                "us-east-1",
                "service"
            ),
            Err("signature does not match the request".into())
        );
        assert!(run(&ok(), v.body, SECRET, "us-west-2", "service")
            .unwrap_err()
            .contains("region"));
        assert!(run(&ok(), v.body, SECRET, "us-east-1", "bedrock")
            .unwrap_err()
            .contains("service"));
        // A signed header's value; the method; the path.
        let mut h = ok();
        h[0].1.push('x');
        assert!(run(&h, v.body, SECRET, "us-east-1", "service").is_err());
        assert!(
            verify_sigv4("PUT", v.path, &ok(), v.body, SECRET, "us-east-1", "service").is_err()
        );
        assert!(verify_sigv4("POST", "/x", &ok(), v.body, SECRET, "us-east-1", "service").is_err());
        // A signature of the wrong length, or twice the header.
        let mut h = ok();
        let last = h.len() - 1;
        h[last].1.pop();
        assert!(run(&h, v.body, SECRET, "us-east-1", "service").is_err());
        let mut h = ok();
        h.push(h[last].clone());
        assert!(run(&h, v.body, SECRET, "us-east-1", "service")
            .unwrap_err()
            .contains("more than one"));
        // An unsigned session token; a missing signed header.
        let mut h = ok();
        h.push(("x-amz-security-token".into(), "t".into()));
        assert!(run(&h, v.body, SECRET, "us-east-1", "service")
            .unwrap_err()
            .contains("not signed"));
        let h: Vec<_> = ok()
            .into_iter()
            .filter(|(k, _)| k != "Content-Length")
            .collect();
        assert!(run(&h, v.body, SECRET, "us-east-1", "service")
            .unwrap_err()
            .contains("content-length"));
        // Malformed authorization headers are errors, not panics.
        for auth in [
            "",
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 Credential",
            "AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host;x-amz-date, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20150830/us-east-1/service/aws4_request, SignedHeaders=x-amz-date;host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20150830/us-east-1/service/aws4_request, SignedHeaders=, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20150831/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20150830/us-east-1/service/aws4_request, Other=1",
            "Bearer xyz",
        ] {
            let mut h = owned(v.headers);
            h.push(("authorization".into(), auth.into()));
            let e = run(&h, v.body, SECRET, "us-east-1", "service").unwrap_err();
            assert!(!e.contains(SECRET), "{e}");
        }
    }

    #[test]
    fn messages_are_framed_with_correct_crcs() {
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let m = encode_exception("throttlingException", br#"{"message":"slow down"}"#);
        assert_eq!(
            u32::from_be_bytes(m[..4].try_into().unwrap()) as usize,
            m.len()
        );
        let n = m.len();
        assert_eq!(crc32(&m[..8]).to_be_bytes(), m[8..12]);
        assert_eq!(crc32(&m[..n - 4]).to_be_bytes(), m[n - 4..]);
        assert!(m.windows(9).any(|w| w == b"exception"));
    }

    #[test]
    fn query_decoding_keeps_odd_percent_signs() {
        assert_eq!(query_decode("a%2Fb+c%"), b"a/b c%".to_vec());
        assert_eq!(query_decode("%4"), b"%4".to_vec());
        assert_eq!(query_decode("%zz"), b"%zz".to_vec());
    }
}
