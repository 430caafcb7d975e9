//! What a command-line agent needs around the client: the server it dials by default, the URL
//! for a server address, the console lines (the session, one line per finished episode, server
//! errors and reconnects: stdout for progress, stderr for trouble) and how a run's end is told.

use super::{ClientEvent, FinalCounts, RunSummary};

/// The server a command-line agent connects to when given none: where `arena serve` listens by
/// default (a test in the server checks that the two agree).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The URL the client dials for a server address (`HOST:PORT`, `http://HOST:PORT[/prefix]`,
/// `ws://HOST:PORT[/path]` or `grpc://HOST:PORT`): `ws://HOST:PORT[/prefix]/api/v1/agent` (or
/// the given ws path) for WebSocket, `grpc://HOST:PORT` for gRPC (no path). TLS schemes are refused (the client
/// connects without TLS), with the reason.
pub fn endpoint(server: &str, grpc: bool) -> Result<String, String> {
    let (scheme, rest) = server.split_once("://").unwrap_or(("", server));
    if !matches!(scheme, "" | "http" | "ws" | "grpc") {
        return Err(format!(
            "--server {server}: {scheme}:// is not supported (the SDK client connects without TLS); \
             give http://HOST:PORT, ws://HOST:PORT/api/v1/agent or grpc://HOST:PORT"
        ));
    }
    let rest = rest.trim_end_matches('/');
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(format!(
            "--server {server}: no HOST:PORT in it; give http://HOST:PORT, ws://HOST:PORT/api/v1/agent or grpc://HOST:PORT"
        ));
    }
    Ok(if grpc {
        // A gRPC target is HOST:PORT alone (a ws:// URL's agent path is dropped).
        if scheme != "ws" && !path.is_empty() {
            return Err(format!(
                "--server {server}: a gRPC endpoint has no path; give grpc://HOST:PORT"
            ));
        }
        format!("grpc://{host}")
    } else if scheme == "ws" && !path.is_empty() {
        format!("ws://{host}/{path}")
    } else if scheme == "grpc" || path.is_empty() {
        format!("ws://{host}/api/v1/agent")
    } else if path == "api/v1/agent" || path.ends_with("/api/v1/agent") {
        // The agent path pasted as it is printed: that path, not a prefix to put it under again.
        format!("ws://{host}/{path}")
    } else {
        // A base URL under a path (a reverse proxy's prefix): the agent's path below it, as the
        // Python SDK dials it.
        format!("ws://{host}/{path}/api/v1/agent")
    })
}

/// Prints the end of a run ("done: submission ... STATUS, N episodes in this run") and says
/// whether it ended well: a submission that ended FAILED (cancelled by the organiser, or abandoned
/// by the server after it went idle) is an error.
pub fn report_done(summary: &RunSummary) -> Result<(), String> {
    println!("{}", done_line(summary));
    if summary.submission_id.is_empty() {
        return Ok(());
    }
    if summary.submission_status == "FAILED" {
        return Err(format!(
            "submission {} ended FAILED (cancelled by the organiser, or abandoned by the server after \
             it went idle)",
            summary.submission_id
        ));
    }
    if let Some(counts) = summary.final_counts
        && counts.scored == 0
    {
        // Completed, yet nothing in it counts: not a run a script should take for a success.
        return Err(format!(
            "submission {} completed with no episode scored: all {} failed or timed out (the reasons at GET \
             /api/v1/submissions/{}/results)",
            summary.submission_id, counts.failed, summary.submission_id
        ));
    }
    Ok(())
}

/// The run's last line. The episodes counted are the ends this run received, over all its
/// connections; where the submission has more (run before, or ended while a connection was
/// down), the line says where all of its results are.
pub fn done_line(summary: &RunSummary) -> String {
    let n = summary.episodes.len();
    let episodes = if n == 1 {
        "1 episode".to_string()
    } else {
        format!("{n} episodes")
    };
    let reconnects = match summary.reconnects {
        0 => String::new(),
        1 => " (1 reconnect)".to_string(),
        r => format!(" ({r} reconnects)"),
    };
    if summary.submission_id.is_empty() {
        return format!("done: practice, {episodes}{reconnects}");
    }
    let mut line = format!(
        "done: submission {} {}, {episodes} in this run{reconnects}",
        summary.submission_id, summary.submission_status
    );
    let total = summary.episodes_total as usize;
    let results = format!("GET /api/v1/submissions/{}/results", summary.submission_id);
    // No session opened: the server said the submission had finished (`--submission-id` of a
    // finished one, or one another agent finished while this run waited to attach).
    if total == 0 && n == 0 {
        line += "; it had finished when this run reached it, nothing was left to run";
    }
    match summary.final_counts {
        // What became of all of them, those this run did not see end too.
        Some(FinalCounts { scored, failed }) => {
            line += &format!("; the submission's {} episodes: {scored} scored", scored + failed);
            if failed > 0 {
                line += &format!(", {failed} failed or timed out (the reasons at {results})");
            }
        }
        None if total > n => {
            line += &format!("; the submission has {total}: its results over all of them at {results}")
        }
        None if total == 0 && n == 0 => line += &format!(": its results at {results}"),
        None => {}
    }
    line
}

pub fn print_event(event: ClientEvent<'_>) {
    match event {
        ClientEvent::Connected(c) if c.submission_id.is_empty() => {
            println!("connected: session {}, practice on {}", c.session_id, c.benchmark)
        }
        ClientEvent::Connected(c) => println!(
            "connected: session {} submission {}, {} of {} episodes to run",
            c.session_id, c.submission_id, c.episodes_remaining, c.episodes_total
        ),
        // EMD of joint-angle frames is in radians (docs/metrics.md).
        // A failed or timed-out episode says why (the server's reason), as Python's does.
        ClientEvent::EpisodeEnd(e) => println!(
            "episode {:>4} {:<9} steps {:>4}  emd {}{}",
            e.episode_id,
            e.status,
            e.steps,
            e.metrics.get("emd").map_or("-".into(), |v| format!("{v:.4} rad")),
            if e.reason.is_empty() {
                String::new()
            } else {
                format!("  ({})", e.reason)
            }
        ),
        ClientEvent::ServerError(e) => eprintln!("server: {}: {}", e.code, e.message),
        ClientEvent::Reconnecting { attempt, delay, error } => {
            eprintln!("connection lost ({error}); retry {attempt} in {delay:?}")
        }
        ClientEvent::EpisodeStart(_) => {}
    }
}

#[cfg(test)]
mod done_line_tests {
    use super::*;
    use crate::protocol::EpisodeEnd;

    #[test]
    fn the_last_line_counts_this_runs_episodes_and_points_to_the_rest() {
        let mut summary = RunSummary {
            submission_id: "sub-1".into(),
            submission_status: "COMPLETED".into(),
            episodes: vec![EpisodeEnd::default(); 2],
            reconnects: 1,
            episodes_total: 6,
            final_counts: None,
        };
        assert_eq!(
            done_line(&summary),
            "done: submission sub-1 COMPLETED, 2 episodes in this run (1 reconnect); the submission has 6: \
             its results over all of them at GET /api/v1/submissions/sub-1/results"
        );
        summary.episodes_total = 2;
        summary.reconnects = 0;
        assert_eq!(
            done_line(&summary),
            "done: submission sub-1 COMPLETED, 2 episodes in this run"
        );
        let practice = RunSummary {
            episodes: vec![EpisodeEnd::default()],
            ..Default::default()
        };
        assert_eq!(done_line(&practice), "done: practice, 1 episode");
        // The server's counts of every episode: a run whose episodes all failed while its
        // connections were cut says so, and is no success.
        summary.episodes = Vec::new();
        summary.episodes_total = 6;
        summary.reconnects = 3;
        summary.final_counts = Some(FinalCounts { scored: 0, failed: 6 });
        assert_eq!(
            done_line(&summary),
            "done: submission sub-1 COMPLETED, 0 episodes in this run (3 reconnects); the submission's 6 episodes: \
             0 scored, 6 failed or timed out (the reasons at GET /api/v1/submissions/sub-1/results)"
        );
        let refused = report_done(&summary).unwrap_err();
        assert!(
            refused.contains("completed with no episode scored: all 6 failed"),
            "{refused}"
        );
        summary.final_counts = Some(FinalCounts { scored: 6, failed: 0 });
        assert!(done_line(&summary).ends_with("the submission's 6 episodes: 6 scored"));
        assert!(report_done(&summary).is_ok());
        // `--submission-id` of a finished submission: no session, the server said it finished.
        let finished = RunSummary {
            submission_id: "sub-1".into(),
            submission_status: "COMPLETED".into(),
            ..Default::default()
        };
        assert_eq!(
            done_line(&finished),
            "done: submission sub-1 COMPLETED, 0 episodes in this run; it had finished when this run reached it, \
             nothing was left to run: its results at GET /api/v1/submissions/sub-1/results"
        );
        // The server's refusal carries its counts: a submission none of whose episodes scored
        // is no success, whichever session saw it end.
        let finished = RunSummary {
            final_counts: Some(FinalCounts { scored: 0, failed: 4 }),
            ..finished
        };
        assert_eq!(
            done_line(&finished),
            "done: submission sub-1 COMPLETED, 0 episodes in this run; it had finished when this run reached it, \
             nothing was left to run; the submission's 4 episodes: 0 scored, 4 failed or timed out (the reasons \
             at GET /api/v1/submissions/sub-1/results)"
        );
        assert!(report_done(&finished).is_err());
    }
}
