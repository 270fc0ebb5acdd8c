//! The live view: one TrainJob, its JobSet and its pods, until it finishes.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The JobSet resource (v1alpha2).
pub(crate) fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    )
}

/// The TrainJob resource.
pub(crate) fn trainjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    )
}

/// Type of the `True` condition to show for an object: `Complete`/`Failed`
/// first, else the first `True` one, else `None`.
pub(crate) fn true_condition(obj: &Value) -> Option<&Value> {
    let conditions = obj.pointer("/status/conditions")?.as_array()?;
    let is_true = |c: &&Value| c.get("status").and_then(Value::as_str) == Some("True");
    conditions
        .iter()
        .filter(is_true)
        .find(|c| {
            matches!(
                c.get("type").and_then(Value::as_str),
                Some("Complete" | "Failed")
            )
        })
        .or_else(|| conditions.iter().find(is_true))
}

/// `demo-node-0-1 Running` (Job name and completion index when known).
pub(crate) fn pod_line(pod: &Pod) -> String {
    let labels = pod.metadata.labels.as_ref();
    let index = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"));
    let job = labels.and_then(|l| l.get("batch.kubernetes.io/job-name"));
    let name = match (job, index) {
        (Some(j), Some(i)) => format!("{j}-{i}"),
        _ => pod.metadata.name.clone().unwrap_or_default(),
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    format!("{name} {phase}")
}

/// Next item of a stream. (This crate has no `futures` dependency: the
/// `Stream` trait is reached through its subtrait kube `WatchStreamExt`,
/// which is implemented for every stream.)
pub(crate) async fn next_item<S: WatchStreamExt + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

/// Caches (reflectors) of one TrainJob, its JobSet and its pods.
pub(crate) struct Watches {
    trainjob: Store<DynamicObject>,
    jobset: Store<DynamicObject>,
    pods: Store<Pod>,
}

/// What the live view shows of one TrainJob at one moment.
pub(crate) struct View {
    /// The TrainJob as JSON (`Null` if absent).
    trainjob: Value,
    /// Its state: the shown `True` condition's type, else `Created`.
    state: String,
    /// `absent`, `present` or the JobSet's shown `True` condition type.
    jobset: String,
    /// `name phase` of each pod, sorted.
    pods: Vec<String>,
}

impl View {
    /// The view from the caches.
    fn of(w: &Watches) -> View {
        let trainjob = w
            .trainjob
            .state()
            .first()
            .map(|o| serde_json::to_value(o.as_ref()).unwrap_or_default())
            .unwrap_or_default();
        let state = condition_type(&trainjob).unwrap_or("Created").to_owned();
        let jobset = match w.jobset.state().first() {
            None => "absent".to_owned(),
            Some(js) => {
                let js = serde_json::to_value(js.as_ref()).unwrap_or_default();
                condition_type(&js).unwrap_or("present").to_owned()
            }
        };
        let mut pods: Vec<String> = w.pods.state().iter().map(|p| pod_line(p)).collect();
        pods.sort();
        View {
            trainjob,
            state,
            jobset,
            pods,
        }
    }

    /// `Created | JobSet: present | pods: demo-node-0-0 Running, …`.
    fn line(&self) -> String {
        let pods = if self.pods.is_empty() {
            "none".to_owned()
        } else {
            self.pods.join(", ")
        };
        format!("{} | JobSet: {} | pods: {pods}", self.state, self.jobset)
    }

    /// `reason`/`message` of the shown condition.
    fn condition_field(&self, key: &str) -> String {
        true_condition(&self.trainjob)
            .and_then(|c| c.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }
}

/// Type of [`true_condition`].
pub(crate) fn condition_type(obj: &Value) -> Option<&str> {
    true_condition(obj)?.get("type")?.as_str()
}

/// Follow every TrainJob in turn until it is `Complete` (`Failed` or
/// `timeout` is an error), then print its `status.jobsStatus`.
pub(crate) async fn live_view(
    client: &kube::Client,
    op: &Operator,
    trainjobs: &[(String, String)],
    timeout: Duration,
) -> Result<(), DemoError> {
    for (ns, name) in trainjobs {
        follow(client, op, ns, name, timeout).await?;
    }
    Ok(())
}

/// How long the live view may show the same line before the demo prints why
/// (once per TrainJob; it goes on waiting).
const STALL: Duration = Duration::from_secs(30);

/// Watch one TrainJob, its JobSet and its pods; print a line as soon as what
/// it shows changes (every pod phase is seen), and at least once a second.
/// Unchanged for [`STALL`], it prints the diagnosis once and goes on.
pub(crate) async fn follow(
    client: &kube::Client,
    op: &Operator,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<(), DemoError> {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (tj_ar, js_ar) = (trainjob_resource(), jobset_resource());
    let tj_writer = Writer::new(tj_ar.clone());
    let js_writer = Writer::new(js_ar.clone());
    let pod_writer = Writer::<Pod>::default();
    let watches = Watches {
        trainjob: tj_writer.as_reader(),
        jobset: js_writer.as_reader(),
        pods: pod_writer.as_reader(),
    };
    let mut tj_events = Box::pin(
        watcher(
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &tj_ar),
            by_name.clone(),
        )
        .default_backoff()
        .reflect(tj_writer),
    );
    let mut js_events = Box::pin(
        watcher(
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &js_ar),
            by_name,
        )
        .default_backoff()
        .reflect(js_writer),
    );
    let mut pod_events = Box::pin(
        watcher(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={name}")),
        )
        .default_backoff()
        .reflect(pod_writer),
    );
    let job = format!("{ns}/{name}");
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let (mut last, mut printed_at): (String, Option<Instant>) = (String::new(), None);
    let (mut changed_at, mut stall_reported) = (Instant::now(), false);
    loop {
        let event = tokio::select! {
            e = next_item(&mut tj_events) => e.map(|r| r.map(|_| ())),
            e = next_item(&mut js_events) => e.map(|r| r.map(|_| ())),
            e = next_item(&mut pod_events) => e.map(|r| r.map(|_| ())),
            _ = tick.tick() => Some(Ok(())),
        };
        match event {
            None => return Err(DemoError::Supervisor("a watch ended".into())),
            // Retried with backoff by the watcher; the view just lags.
            Some(Err(e)) => tracing::debug!("watch error (retrying): {e}"),
            Some(Ok(())) => {}
        }
        op.check()?;
        let elapsed = start.elapsed();
        let view = View::of(&watches);
        let line = view.line();
        if line != last {
            changed_at = Instant::now();
        }
        if line != last || printed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            println!(
                "demo: [{:>5.1}s] TrainJob {job}: {line}",
                elapsed.as_secs_f64()
            );
            last = line;
            printed_at = Some(Instant::now());
        }
        let finished = matches!(view.state.as_str(), "Complete" | "Failed");
        if !finished && !stall_reported && changed_at.elapsed() >= STALL {
            stall_reported = true;
            println!(
                "demo: TrainJob {job} shows no change for {}s; what the cluster and the operator say (still waiting, up to {}s):",
                STALL.as_secs(),
                timeout.as_secs()
            );
            println!("{}", diagnose(client, op, Some((ns, name))).await);
        }
        match view.state.as_str() {
            "Complete" => {
                println!(
                    "demo: TrainJob {job} Complete {:.1}s after it was applied ({}: {})",
                    elapsed.as_secs_f64(),
                    view.condition_field("reason"),
                    view.condition_field("message")
                );
                println!("demo: status.jobsStatus of {job}:");
                let statuses = view
                    .trainjob
                    .pointer("/status/jobsStatus")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if statuses.is_empty() {
                    println!("demo:   (empty)");
                }
                for s in statuses {
                    println!("demo:   {s}");
                }
                return Ok(());
            }
            "Failed" => {
                return Err(DemoError::JobFailed {
                    job,
                    reason: view.condition_field("reason"),
                    message: view.condition_field("message"),
                    why: diagnose(client, op, Some((ns, name))).await,
                });
            }
            _ if elapsed > timeout => {
                return Err(DemoError::Timeout {
                    job,
                    secs: timeout.as_secs(),
                    last,
                    why: diagnose(client, op, Some((ns, name))).await,
                });
            }
            _ => {}
        }
    }
}
