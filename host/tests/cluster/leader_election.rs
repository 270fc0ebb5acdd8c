//! Leader election on a real API server (api mode): two electors on the same
//! Lease → exactly one leader; releasing the leader (graceful shutdown) →
//! the standby takes over within a few retry periods; a leader that vanishes
//! without releasing is replaced after the Lease expires; the operator
//! process whose Lease is taken by another holder exits with a non-zero code
//! (so that its pod restarts). Takeover times are printed (figures, not
//! asserts beyond generous bounds). Fencing: a leader paused past its Lease
//! writes nothing once it runs again, told by the API server's audit log of
//! each replica's ServiceAccount.
//!
//! Skips (passes with a note on stderr) when the control plane is not built.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use trainforge::ops::leader::{LeaderElection, LeaderOptions};
use trainforge_testenv::{Mode, TestEnv};

/// The namespace of the operator replicas' ServiceAccounts and Lease (fixed:
/// the audit policy names their users before the control plane starts).
const REPLICAS_NS: &str = "fencing";
const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];

/// This module's control plane: its API server audits the requests of the
/// two replicas' ServiceAccounts.
fn env() -> Option<&'static TestEnv> {
    let users = REPLICAS.map(|r| format!("system:serviceaccount:{REPLICAS_NS}:{r}"));
    let users: Vec<&str> = users.iter().map(String::as_str).collect();
    trainforge_testenv::shared_audited(Mode::Api, &users)
        .unwrap_or_else(|e| panic!("trainforge-testenv: audited control plane unavailable: {e}"))
}

fn opts(ns: &str, lease: &str, who: &str, duration: u64, deadline: u64) -> LeaderOptions {
    LeaderOptions {
        lease_name: lease.to_owned(),
        namespace: ns.to_owned(),
        identity: format!("{who}_{}", std::process::id()),
        lease_duration: Duration::from_secs(duration),
        renew_deadline: Duration::from_secs(deadline),
        retry_period: Duration::from_secs(1),
    }
}

fn figure(msg: &str) {
    let _ = writeln!(std::io::stderr(), "leader election: {msg}");
}

async fn holder(client: &kube::Client, ns: &str, lease: &str) -> Option<String> {
    let l = Api::<Lease>::namespaced(client.clone(), ns)
        .get(lease)
        .await
        .ok()?;
    l.spec?.holder_identity
}

/// Wait until exactly one of `electors` is leader; its index.
async fn one_leader(electors: &[&LeaderElection], within: Duration) -> usize {
    let start = Instant::now();
    loop {
        let leaders: Vec<usize> = electors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_leader())
            .map(|(i, _)| i)
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if leaders.len() == 1 {
            return leaders[0];
        }
        assert!(start.elapsed() < within, "no leader after {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_fast_takeover_on_release() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("leader").await.unwrap();
    let stop = CancellationToken::new();

    let t0 = Instant::now();
    let a = LeaderElection::start(client.clone(), opts(&ns, "ops", "a", 15, 10), stop.clone())
        .await
        .unwrap();
    let b = LeaderElection::start(client.clone(), opts(&ns, "ops", "b", 15, 10), stop.clone())
        .await
        .unwrap();
    let first = one_leader(&[&a, &b], Duration::from_secs(20)).await;
    figure(&format!("first leader after {:?}", t0.elapsed()));

    // Stays exactly one leader for a while (a renewal happens in between
    // with these timings only after 10 s; 3 s checks the steady state).
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            a.is_leader() as u8 + b.is_leader() as u8,
            1,
            "not exactly one leader"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leader, standby) = if first == 0 { (a, b) } else { (b, a) };
    assert_eq!(
        holder(&client, &ns, "ops").await.as_deref(),
        Some(leader.identity())
    );

    // Graceful shutdown of the leader: the Lease is released, the standby
    // takes over well before the 15 s Lease would have expired.
    let released = Instant::now();
    leader.release().await.unwrap();
    assert!(standby.acquired().await);
    let takeover = released.elapsed();
    figure(&format!(
        "takeover after release: {takeover:?} (retry period 1 s, lease 15 s)"
    ));
    assert!(
        takeover < Duration::from_secs(10),
        "takeover took {takeover:?}"
    );
    assert_eq!(
        holder(&client, &ns, "ops").await.as_deref(),
        Some(standby.identity())
    );

    // Cancelling the shared stop token releases the new leader too.
    stop.cancel();
    standby.release().await.unwrap();
    assert_eq!(holder(&client, &ns, "ops").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_leader_is_replaced_after_expiry() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("leader-crash").await.unwrap();

    // The "crashed" leader runs in its own runtime, dropped without release.
    let crashed_opts = opts(&ns, "ops", "crashed", 4, 2);
    let crashed_identity = crashed_opts.identity.clone();
    let kubeconfig = env.kubeconfig().to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let client = trainforge_testenv::kubeconfig::client(&kubeconfig)
                .await
                .unwrap();
            let le = LeaderElection::start(client, crashed_opts, CancellationToken::new())
                .await
                .unwrap();
            assert!(le.acquired().await);
            std::mem::forget(le);
        });
        // Dropping the runtime kills the election task without a release.
        drop(rt);
    })
    .join()
    .unwrap();
    assert_eq!(
        holder(&client, &ns, "ops").await.as_deref(),
        Some(crashed_identity.as_str())
    );

    let t = Instant::now();
    let standby = LeaderElection::start(
        client.clone(),
        opts(&ns, "ops", "standby", 4, 2),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(!standby.is_leader());
    assert!(
        tokio::time::timeout(Duration::from_secs(20), standby.acquired())
            .await
            .unwrap()
    );
    figure(&format!(
        "takeover after a crash: {:?} (lease 4 s)",
        t.elapsed()
    ));
    assert_eq!(
        holder(&client, &ns, "ops").await.as_deref(),
        Some(standby.identity())
    );
    standby.release().await.unwrap();
}

/// Kills the operator child if the test ends early.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_exits_non_zero_when_its_lease_is_taken() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("leader-lost").await.unwrap();
    let log = env.dir().join(format!("logs/{ns}-operator.log"));
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .args([
                "operator",
                "--leader-elect",
                "--lease-namespace",
                &ns,
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                "0",
            ])
            .env("KUBECONFIG", env.kubeconfig())
            .env("POD_NAME", "victim")
            .env("RUST_LOG", "info,kube=warn")
            .env("TRAINFORGE_LOG_FORMAT", "text")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap(),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // It takes the Lease (its identity is `victim_<suffix>`).
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    let start = Instant::now();
    while !holder(&client, &ns, "trainforge-operator")
        .await
        .is_some_and(|h| h.starts_with("victim_"))
    {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "operator exited early:\n{}",
            log_text()
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never leader:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Another holder takes it over (as after a partition: fresh renewal,
    // long duration).
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .patch(
            "trainforge-operator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "holderIdentity": "thief",
                "acquireTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
                "leaseDurationSeconds": 300,
            }})),
        )
        .await
        .unwrap();
    let stolen = Instant::now();

    // The holder notices at its next renewal (10 s after the last) and the
    // process ends with an error.
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stolen.elapsed() < Duration::from_secs(60),
            "still running 60 s after losing the Lease:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    figure(&format!(
        "operator exited {:?} after losing the Lease ({status})",
        stolen.elapsed()
    ));
    assert!(!status.success(), "exit status {status}:\n{}", log_text());
    assert_eq!(status.code(), Some(1), "{}", log_text());
    let text = log_text();
    assert!(text.contains("lost the Lease"), "{text}");
    assert!(
        text.contains("lost the leader-election Lease"),
        "the error is printed: {text}"
    );
    assert_eq!(
        holder(&client, &ns, "trainforge-operator").await.as_deref(),
        Some("thief"),
        "the exiting operator did not clear the new holder's Lease"
    );
}

/// One request of the audit log, as far as fencing needs it.
struct Audited {
    user: String,
    verb: String,
    resource: String,
    group: String,
    /// The request's path, without its query.
    path: String,
    code: i64,
    at: k8s_openapi::jiff::Timestamp,
}

fn audit(env: &TestEnv) -> Vec<Audited> {
    let path = env.audit_log().expect("the audit log");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| Audited {
            user: e["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            verb: e["verb"].as_str().unwrap_or_default().to_owned(),
            resource: e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            group: e["objectRef"]["apiGroup"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            path: e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned(),
            code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
            at: e["requestReceivedTimestamp"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap(),
        })
        .collect()
}

/// `user`'s requests that change something.
fn writes_of<'a>(log: &'a [Audited], user: &'a str) -> impl Iterator<Item = &'a Audited> + 'a {
    log.iter().filter(move |e| e.user == user && e.writes())
}

impl Audited {
    /// A request that changes something (not a read, not an access review).
    fn writes(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && !self.group.ends_with("authorization.k8s.io")
            && !self.group.ends_with("authentication.k8s.io")
    }
}

/// Fencing (issue 31): two operator replicas, each under its own
/// ServiceAccount, so that the API server's audit log tells their writes
/// apart. The leader is paused (SIGSTOP) in the middle of a burst of
/// TrainJobs; the standby takes over once the Lease expires and builds the
/// rest; then the old leader runs again, with reconciles in flight: from
/// then on the API server receives no write from it but failed attempts on
/// the Lease, and it exits with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_writes_nothing_once_it_runs_again() {
    use crate::operator_common::{
        Operator, apply, apply_default_plugins, docs, root, trainjob_object,
    };
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REPLICAS_NS}}),
    )
    .await;
    let mut kubeconfigs = Vec::new();
    for r in REPLICAS {
        apply(
            &client,
            &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": r, "namespace": REPLICAS_NS}}),
        )
        .await;
        apply(
            &client,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("fencing-{r}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": r, "namespace": REPLICAS_NS}]}),
        )
        .await;
        let kc = env.dir().join(format!("{r}.kubeconfig"));
        trainforge_testenv::kubeconfig::write_service_account(
            env.kubeconfig(),
            REPLICAS_NS,
            r,
            3600,
            &kc,
        )
        .await
        .unwrap();
        kubeconfigs.push(kc);
    }
    apply_default_plugins(&client).await;
    for d in docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    let elect = [
        "--leader-elect",
        "--lease-namespace",
        REPLICAS_NS,
        "--resync-seconds",
        "30",
    ];
    let a = Operator::start_as(env, "replica-a", &elect, &kubeconfigs[0]);
    a.wait_ready().await;
    let start = Instant::now();
    let a_identity = loop {
        if let Some(h) = holder(&client, REPLICAS_NS, "trainforge-operator").await {
            break h;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "a never led");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let b = Operator::start_as(env, "replica-b", &elect, &kubeconfigs[1]);
    b.wait_ready().await;

    // A burst of TrainJobs; the leader is paused as soon as it has built
    // the first JobSet.
    let ns = env.create_namespace("fencing-jobs").await.unwrap();
    const JOBS: usize = 60;
    futures::future::join_all((0..JOBS).map(|i| {
        let tj = trainjob_object(
            &ns,
            &format!("burst-{i}"),
            "torch-distributed",
            json!({"suspend": true}),
        );
        let client = client.clone();
        async move { apply(&client, &tj).await }
    }))
    .await;
    let jobsets = |client: kube::Client, ns: String| async move {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client,
            &ns,
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "jobset.x-k8s.io",
                "v1alpha2",
                "JobSet",
            )),
        );
        api.list(&Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    };
    let start = Instant::now();
    while jobsets(client.clone(), ns.clone()).await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no JobSet from a:\n{}",
            a.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.pause();
    let paused = k8s_openapi::jiff::Timestamp::now();
    let built_by_a = jobsets(client.clone(), ns.clone()).await;

    // b takes the Lease once it expires, and builds every other JobSet.
    let start = Instant::now();
    while holder(&client, REPLICAS_NS, "trainforge-operator")
        .await
        .as_deref()
        == Some(a_identity.as_str())
    {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "b never took over:\n{}",
            b.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took_over = start.elapsed();
    while jobsets(client.clone(), ns.clone()).await < JOBS {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "b did not build every JobSet:\n{}",
            b.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // a runs again, with the reconciles it was paused in.
    let resumed = k8s_openapi::jiff::Timestamp::now();
    a.resume();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = a.exit_status() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a still runs 60 s after it was resumed:\n{}",
            a.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!status.success(), "a exited {status}:\n{}", a.log_tail(30));
    figure(&format!(
        "paused leader: {built_by_a} of {JOBS} JobSets built before the pause, b led {took_over:?} after it, a exited {:?} after it ran again",
        start.elapsed()
    ));
    let (a_user, b_user) = (
        format!("system:serviceaccount:{REPLICAS_NS}:{}", REPLICAS[0]),
        format!("system:serviceaccount:{REPLICAS_NS}:{}", REPLICAS[1]),
    );
    let log = audit(env);
    assert!(
        writes_of(&log, &a_user).any(|e| e.at < paused && e.resource == "jobsets"),
        "the audit log has a's writes before the pause"
    );
    assert!(
        writes_of(&log, &b_user).any(|e| e.at > paused && e.resource == "jobsets"),
        "the audit log has b's writes after the takeover"
    );
    // A write that passed the fence just before the pause is sent when the
    // process runs again (the documented gap, `ops::fence`): the operator
    // says so, naming it. Any other write done after a ran again is a
    // fault: it passed a fence that should have been closed.
    let a_log = a.log_tail(100_000);
    let warned = |path: &str| {
        let named = format!("path={path} ");
        a_log
            .lines()
            .any(|l| l.contains("was done after it") && l.contains(&named))
    };
    let after: Vec<String> = writes_of(&log, &a_user)
        .filter(|e| e.at >= resumed && e.code < 400 && !warned(&e.path))
        .map(|e| format!("{} {} → {}", e.verb, e.path, e.code))
        .collect();
    assert!(
        after.is_empty(),
        "a wrote after it ran again, through its fence: {after:?}\n{}",
        a.log_tail(40)
    );
    let late = writes_of(&log, &a_user)
        .filter(|e| e.at >= resumed && e.code < 400)
        .count();
    if late > 0 {
        figure(&format!(
            "paused leader: {late} write(s) passed the fence before the pause and were done after it (warned)"
        ));
    }
    assert!(
        a.log_tail(400).contains("write refused"),
        "a's reconciles in flight were refused:\n{}",
        a.log_tail(40)
    );
    b.kill();
}
