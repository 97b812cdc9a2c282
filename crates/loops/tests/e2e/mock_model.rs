//! A mock model server for the real-CLI tests: just enough HTTP/1.1 and SSE for
//! claude (`POST /v1/messages`), codex (`POST /v1/responses`) and opencode
//! (`POST /v1/chat/completions`) to complete one turn with a canned reply, or to fail
//! every model request with an HTTP error.
//!
//! Session ids are the CLIs' own (claude's, codex's thread id); a resumed session's
//! request carries the earlier turns (prompt and reply), which is how the session tests
//! (`agent_ops::real_*_resumes_…`) see a resume — the mock needs no state of its own.
//!
//! Bound to 127.0.0.1 on a free port; a thread per connection; every response closes
//! its connection (SSE bodies have no length, and clients simply reconnect). Every
//! request is recorded so tests can check that the prompt (sent to the CLI on stdin)
//! reached the model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// How the mock answers model requests.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Complete the turn with this assistant text.
    Reply(String),
    /// Answer every model request with this HTTP status and error message.
    Fail { status: u16, message: String },
    /// Answer every model request with this HTTP status and JSON body: an API's own
    /// error document (claude's `authentication_error`, OpenAI's
    /// `usage_limit_reached` with its `resets_at`).
    FailWith { status: u16, body: Value },
    /// An agent turn with tools (Anthropic's API): a request that offers the tool
    /// `calls[0]` names is answered with the `tool_use` of the first call whose result
    /// the conversation does not hold yet (counting its `tool_result` blocks), then,
    /// once every call has its result, with `reply`. Other requests get `reply`.
    Tools {
        calls: Vec<(String, Value)>,
        reply: String,
    },
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub body: String,
}

pub struct MockModel {
    addr: SocketAddr,
    /// How it answers from now on ([`MockModel::answer`]).
    mode: Arc<Mutex<Mode>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockModel {
    pub fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mode = Arc::new(Mutex::new(mode));
        let acceptor = {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            let mode = Arc::clone(&mode);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let requests = Arc::clone(&requests);
                    let mode = mode.lock().unwrap().clone();
                    std::thread::spawn(move || {
                        let _ = serve(stream, &mode, &requests);
                    });
                }
            })
        };
        Self {
            addr,
            mode,
            requests,
            stop,
            acceptor: Some(acceptor),
        }
    }

    /// Answers the requests that arrive from now on by `mode` (a later run's turn).
    pub fn answer(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Whether some model request carried `text` (e.g. the prompt).
    pub fn saw(&self, text: &str) -> bool {
        self.requests().iter().any(|r| r.body.contains(text))
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Reads one request, records it and answers it; the connection then closes.
fn serve(stream: TcpStream, mode: &Mode, requests: &Mutex<Vec<Recorded>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut content_length = 0usize;
    let mut chunked = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            break;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                content_length = value.parse().unwrap_or(0);
            } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut body = vec![0; content_length];
        reader.read_exact(&mut body)?;
        body
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    requests.lock().unwrap().push(Recorded {
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
    });
    let mut out = stream;
    respond(&mut out, mode, &method, &path, &body)
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 {
            let mut trailer = String::new();
            reader.read_line(&mut trailer)?;
            return Ok(body);
        }
        let mut chunk = vec![0; size];
        reader.read_exact(&mut chunk)?;
        body.extend_from_slice(&chunk);
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

fn respond(
    out: &mut TcpStream,
    mode: &Mode,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<()> {
    let route = path.split('?').next().unwrap_or(path);
    let request: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let streaming = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if method == "GET" && route.ends_with("/models") {
        let models = json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"}]});
        return send_json(out, 200, &models);
    }
    if method != "POST" {
        return send_json(
            out,
            404,
            &json!({"error": {"message": format!("no route {method} {path}")}}),
        );
    }
    if route.ends_with("/count_tokens") {
        return send_json(out, 200, &json!({"input_tokens": 10}));
    }
    let reply = match mode {
        Mode::Fail { status, message } => {
            // Anthropic's error shape; OpenAI clients read the same `error.message`.
            let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            return send_json(out, *status, &error);
        }
        Mode::FailWith { status, body } => return send_json(out, *status, body),
        Mode::Reply(reply) => reply.as_str(),
        Mode::Tools { calls, reply } => match next_tool_call(&request, calls) {
            Some((n, (name, input))) if route == "/v1/messages" => {
                let id = format!("toolu_mock_{n}");
                return if streaming {
                    send_sse(out, &anthropic_tool_events(&id, name, input))
                } else {
                    send_json(out, 200, &anthropic_tool_message(&id, name, input))
                };
            }
            _ => reply.as_str(),
        },
    };
    match route {
        "/v1/messages" if streaming => send_sse(out, &anthropic_events(reply)),
        "/v1/messages" => send_json(out, 200, &anthropic_message(reply)),
        "/v1/responses" => send_sse(out, &responses_events(reply)),
        "/v1/chat/completions" if streaming => send_sse(out, &chat_events(reply)),
        "/v1/chat/completions" => send_json(out, 200, &chat_completion(reply)),
        _ => send_json(
            out,
            404,
            &json!({"error": {"message": format!("no route {method} {path}")}}),
        ),
    }
}

fn send_json(out: &mut TcpStream, status: u16, value: &Value) -> std::io::Result<()> {
    let body = value.to_string();
    write!(
        out,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        reason(status),
        body.len()
    )?;
    out.flush()
}

/// `(event name, data)` pairs as an SSE stream; `None` names send data-only events
/// (OpenAI chat), and a `"[DONE]"` string is sent verbatim.
fn send_sse(out: &mut TcpStream, events: &[(Option<&str>, Value)]) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    )?;
    for (name, data) in events {
        if let Some(name) = name {
            writeln!(out, "event: {name}")?;
        }
        match data {
            Value::String(s) => write!(out, "data: {s}\n\n")?,
            other => write!(out, "data: {other}\n\n")?,
        }
        out.flush()?;
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Error",
    }
}

fn anthropic_message(reply: &str) -> Value {
    json!({
        "id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-mock",
        "content": [{"type": "text", "text": reply}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 11, "output_tokens": 7}
    })
}

fn anthropic_events(reply: &str) -> Vec<(Option<&'static str>, Value)> {
    vec![
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-mock",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": reply}}),
        ),
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ]
}

fn responses_events(reply: &str) -> Vec<(Option<&'static str>, Value)> {
    let item = json!({"type": "message", "role": "assistant", "id": "msg_mock", "status": "completed",
        "content": [{"type": "output_text", "text": reply, "annotations": []}]});
    vec![
        (
            Some("response.created"),
            json!({"type": "response.created", "response": {"id": "resp_mock"}}),
        ),
        (
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            Some("response.completed"),
            json!({"type": "response.completed", "response": {"id": "resp_mock",
            "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}}}),
        ),
    ]
}

fn chat_completion(reply: &str) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 13, "completion_tokens": 9, "total_tokens": 22}})
}

fn chat_events(reply: &str) -> Vec<(Option<&'static str>, Value)> {
    let chunk = |delta: Value, finish: Value, usage: Option<Value>| {
        let mut c = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if let Some(usage) = usage {
            c["usage"] = usage;
        }
        (None, c)
    };
    vec![
        chunk(
            json!({"role": "assistant", "content": reply}),
            Value::Null,
            None,
        ),
        chunk(
            json!({}),
            json!("stop"),
            Some(json!({"prompt_tokens": 13, "completion_tokens": 9, "total_tokens": 22})),
        ),
        (None, Value::String("[DONE]".into())),
    ]
}

/// The call of `calls` a request is to be answered with: the first one whose result
/// its messages do not hold yet, when the request offers the tools (the first call's
/// tool among them).
fn next_tool_call<'a>(
    request: &Value,
    calls: &'a [(String, Value)],
) -> Option<(usize, &'a (String, Value))> {
    let offered = request
        .get("tools")
        .and_then(Value::as_array)?
        .iter()
        .any(|t| t.get("name").and_then(Value::as_str) == calls.first().map(|c| c.0.as_str()));
    if !offered {
        return None;
    }
    let results = request
        .get("messages")
        .and_then(Value::as_array)
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m.get("content").and_then(Value::as_array))
                .flatten()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
                .count()
        })
        .unwrap_or(0);
    calls.get(results).map(|call| (results, call))
}

fn anthropic_tool_message(id: &str, name: &str, input: &Value) -> Value {
    json!({
        "id": "msg_mock_tool", "type": "message", "role": "assistant", "model": "claude-mock",
        "content": [{"type": "tool_use", "id": id, "name": name, "input": input}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 11, "output_tokens": 7}
    })
}

fn anthropic_tool_events(
    id: &str,
    name: &str,
    input: &Value,
) -> Vec<(Option<&'static str>, Value)> {
    vec![
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {
            "id": "msg_mock_tool", "type": "message", "role": "assistant", "model": "claude-mock",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ),
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ]
}
