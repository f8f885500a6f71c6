use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn pool(n: usize) -> Arc<ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap(),
    )
}

/// Jobs that finish in reverse order of dispatch still come out in order.
#[test]
fn ordered_queue_keeps_push_order() {
    let p = pool(4);
    let mut q = OrderedQueue::new(Arc::clone(&p), "test");
    for i in 0..32u64 {
        q.push(move || {
            std::thread::sleep(Duration::from_micros((32 - i) * 300));
            i
        });
    }
    let got: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|r| r.unwrap()).collect();
    assert_eq!(got, (0..32).collect::<Vec<_>>());
    assert!(q.is_empty());
}

#[test]
fn a_panicking_job_is_lost_naming_its_stage_and_later_jobs_still_arrive() {
    let p = pool(2);
    let mut q = OrderedQueue::new(Arc::clone(&p), "frame inflate");
    q.push(|| 1);
    q.push(|| panic!("boom"));
    q.push(|| 3);
    assert_eq!(q.pop().unwrap(), Ok(1));
    let lost = q.pop().unwrap().unwrap_err();
    assert_eq!(lost.stage, "frame inflate");
    assert!(lost.to_string().contains("frame inflate"), "{lost}");
    assert_eq!(q.pop().unwrap(), Ok(3));
    assert!(q.pop().is_none());
}

/// A worker of a one-thread pool that waits for a job on the same pool runs
/// that job itself instead of deadlocking.
#[test]
fn waiting_inside_a_one_thread_pool_runs_the_awaited_job() {
    let p = pool(1);
    let inner = Arc::clone(&p);
    let v = p.install(move || spawn(&inner, || 41 + 1).wait(&inner, "inner"));
    assert_eq!(v, Ok(42));
}

/// With the channel full, `send` on the only worker runs the queued job
/// that empties it instead of blocking that worker forever.
#[test]
fn sending_inside_a_one_thread_pool_lets_queued_jobs_drain() {
    let p = pool(1);
    let inner = Arc::clone(&p);
    let taken = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&taken);
    let left: usize = p.install(move || {
        let (tx, rx) = bounded::<usize>(1);
        for v in [1, 2, 3] {
            send(&inner, &tx, v).expect("receiver alive");
            let (rx, seen) = (rx.clone(), Arc::clone(&seen));
            inner.spawn(move || {
                if let Ok(v) = rx.try_recv() {
                    seen.fetch_add(v, Ordering::SeqCst);
                }
            });
        }
        while inner.yield_now() == Some(Yield::Executed) {}
        rx.try_iter().sum()
    });
    assert_eq!(taken.load(Ordering::SeqCst) + left, 6);
    assert!(
        taken.load(Ordering::SeqCst) >= 3,
        "jobs ran while send waited"
    );
}

#[test]
fn disconnection_is_reported() {
    let p = pool(1);
    let (tx, rx) = bounded::<u8>(1);
    drop(tx);
    assert_eq!(recv(&p, &rx), Err(RecvError));
    let (tx, rx) = bounded::<u8>(1);
    drop(rx);
    assert!(send(&p, &tx, 1).is_err());
}

#[test]
fn ordered_map_keeps_production_order_and_ends() {
    let p = pool(3);
    let mut o = Ordered::spawn(
        Arc::clone(&p),
        "square",
        4,
        |emit| {
            for i in 0..100u64 {
                if !emit(i) {
                    return;
                }
            }
        },
        |i: u64| {
            if i.is_multiple_of(7) {
                std::thread::sleep(Duration::from_millis(1));
            }
            i * i
        },
    )
    .unwrap();
    let mut got = Vec::new();
    while let Some(r) = o.next_result() {
        got.push(r.unwrap());
    }
    assert_eq!(got, (0..100u64).map(|i| i * i).collect::<Vec<_>>());
}

#[test]
fn ordered_map_reports_a_panicking_worker() {
    let p = pool(2);
    let mut o = Ordered::spawn(
        Arc::clone(&p),
        "parse",
        2,
        |emit| {
            for i in 0..3u32 {
                emit(i);
            }
        },
        |i: u32| {
            if i == 1 {
                panic!("bad batch");
            }
            i
        },
    )
    .unwrap();
    assert_eq!(o.next_result().unwrap(), Ok(0));
    assert_eq!(o.next_result().unwrap(), Err(Lost { stage: "parse" }));
    assert_eq!(o.next_result().unwrap(), Ok(2));
    assert!(o.next_result().is_none());
}

/// Dropping the consumer early stops an endless producer at its next emit
/// instead of hanging the drop.
#[test]
fn dropping_an_ordered_map_early_stops_the_producer() {
    let p = pool(2);
    let produced = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&produced);
    let (done_tx, done_rx) = bounded::<()>(1);
    let mut o = Ordered::spawn(
        Arc::clone(&p),
        "endless",
        2,
        move |emit| {
            while emit(()) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let _ = done_tx.send(());
        },
        |()| 7u8,
    )
    .unwrap();
    assert_eq!(o.next_result().unwrap(), Ok(7));
    drop(o);
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the producer stopped after the consumer went away");
    assert!(produced.load(Ordering::SeqCst) >= 1);
}

/// The reader loop: items in order, then an error as the last item with
/// nothing read after it.
#[test]
fn pump_emits_items_then_the_error_and_reads_no_further() {
    let p = pool(2);
    let mut reads = 0u32;
    let mut o = Ordered::spawn(
        Arc::clone(&p),
        "read",
        2,
        move |emit| {
            pump(
                || {
                    reads += 1;
                    match reads {
                        1..=3 => Ok(Some(reads)),
                        4 => Err(format!("bad record at read {reads}")),
                        _ => panic!("read past the error"),
                    }
                },
                emit,
            )
        },
        |item: Result<u32, String>| item.map(|i| i * 10),
    )
    .unwrap();
    let got: Vec<_> = std::iter::from_fn(|| o.next_result())
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        got,
        vec![
            Ok(10),
            Ok(20),
            Ok(30),
            Err("bad record at read 4".to_string())
        ]
    );
}

/// The reader loop ends at `Ok(None)` without reading again, and stops
/// reading when the consumer is gone.
#[test]
fn pump_stops_at_the_end_and_when_the_consumer_is_gone() {
    let mut calls = 0;
    let mut seen = Vec::new();
    pump(
        || {
            calls += 1;
            Ok::<_, ()>(if calls <= 2 { Some(calls) } else { None })
        },
        &mut |item| {
            seen.push(item.unwrap());
            true
        },
    );
    assert_eq!((calls, seen), (3, vec![1, 2]));
    let mut calls = 0;
    pump(
        || {
            calls += 1;
            Ok::<_, ()>(Some(calls))
        },
        &mut |_| false,
    );
    assert_eq!(calls, 1, "no read after the consumer went away");
}

/// The consumer thread of an `OrderedSink` meets results in push order
/// whatever order the jobs finish in, a panicking job as `Lost` in its
/// place, and `finish` returns what the consumer returned.
#[test]
fn ordered_sink_consumer_takes_results_in_push_order() {
    let p = pool(4);
    let mut sink = OrderedSink::spawn(Arc::clone(&p), "sink test", 3, |next| {
        let mut got = Vec::new();
        while let Some(r) = next() {
            got.push(r.map_err(|lost| lost.stage));
        }
        got
    })
    .unwrap();
    for i in 0..24u64 {
        assert!(sink.push(move || {
            std::thread::sleep(Duration::from_micros((24 - i) * 200));
            if i == 7 {
                panic!("job 7");
            }
            i
        }));
    }
    let got = sink.finish().unwrap();
    let want: Vec<Result<u64, &str>> = (0..24)
        .map(|i| if i == 7 { Err("sink test") } else { Ok(i) })
        .collect();
    assert_eq!(got, want);
}

/// A consumer that stops early makes later pushes return false, and
/// `finish` still hands back what it returned; a consumer that panics is
/// `Lost`.
#[test]
fn ordered_sink_consumer_stopping_or_panicking_is_reported() {
    let p = pool(2);
    let mut sink = OrderedSink::spawn(Arc::clone(&p), "stopper", 1, |next| {
        next().map(|r| r.unwrap())
    })
    .unwrap();
    let mut pushed = 0;
    while sink.push(|| 5u32) {
        pushed += 1;
        assert!(
            pushed < 1000,
            "pushes kept succeeding after the consumer stopped"
        );
    }
    assert!(!sink.push(|| 6));
    assert_eq!(sink.finish(), Ok(Some(5)));

    let mut sink = OrderedSink::spawn(Arc::clone(&p), "panicker", 1, |next| -> u32 {
        next();
        panic!("consumer gone")
    })
    .unwrap();
    sink.push(|| 1u32);
    assert_eq!(sink.finish(), Err(Lost { stage: "panicker" }));
}

/// A pool worker pushing into a full sink runs the queued jobs meanwhile,
/// so a one-thread pool does not deadlock.
#[test]
fn ordered_sink_pushed_from_a_one_thread_pool_does_not_deadlock() {
    let p = pool(1);
    let inner = Arc::clone(&p);
    let total = p.install(move || {
        let mut sink = OrderedSink::spawn(Arc::clone(&inner), "one", 2, |next| {
            let mut sum = 0u64;
            while let Some(r) = next() {
                sum += r.unwrap();
            }
            sum
        })
        .unwrap();
        for i in 0..100u64 {
            assert!(sink.push(move || i));
        }
        sink.finish()
    });
    assert_eq!(total, Ok(4950));
}
