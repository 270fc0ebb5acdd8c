#!/bin/bash
# Flux entrypoint of the trainer container `node`: sets up the Flux view the
# init container `flux-installer` copied to /mnt/flux, then starts a Flux
# broker. The lead pod runs the TrainJob's command (the first argument of
# this script, the original command and args joined) under `flux run`; the
# others join as followers until the lead's instance ends.
# Rendered for this TrainJob by the Trainforge Flux plugin.

shared=/mnt/flux
view=${shared}/view
config=${shared}/config
fluxuid=$(id -u "$(whoami)")

# Flux goes AFTER the image's PATH, so the image's own tools (e.g. its
# Python) come first.
export PATH=${PATH}:${view}/bin

# The view links into /opt/software (the `spack-install` volume).
cp -R "${shared}"/software/* /opt/software/

# Flux's Python bindings: the view's python3.X, linked as python/python3.
pyroot=$(find "${view}" -maxdepth 2 -type d -path "${view}/lib/python3*" 2>/dev/null)
pybin=${view}/bin/$(basename "${pyroot}")
echo "Flux Python: ${pybin} (${pyroot})"
if [[ -f "${pybin}" ]]; then
    rm -rf "${view}/bin/python3" "${view}/bin/python"
    ln -s "${pybin}" "${view}/lib/python" || true
    ln -s "${pybin}" "${view}/lib/python3" || true
fi
export PYTHONPATH=${PYTHONPATH:-""}:${pyroot}/site-packages
export FLUX_RC_EXTRA=${view}/etc/flux/rc1.d

# Helpers for interactive use: switch to the Fluxion scheduler, and the
# environment of this view.
printf '%s\n' \
    "flux module remove sched-simple" \
    "flux module load sched-fluxion-resource" \
    "flux module load sched-fluxion-qmanager" > "${shared}/load-fluxion.sh"
printf '%s\n' \
    "#!/bin/bash" \
    "export PATH=${PATH}" \
    "export PYTHONPATH=${PYTHONPATH}" \
    "export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-""}:${view}/lib" \
    "export fluxsocket=local://${config}/run/flux/local" > "${shared}/flux-view.sh"

# The CURVE certificate (Secret volume /curve), readable by its owner only.
cert=${config}/etc/curve/curve.cert
cp /curve/curve.cert "${cert}"
chmod go-r "${cert}"
chown -R "${fluxuid}" "${cert}"

# The resources of every broker (flux-R(1)).
flux R encode --hosts="$(cat "${config}/etc/flux/system/hostlist")" {{resources}} > /tmp/R
mv /tmp/R "${config}/etc/flux/system/R"

export STATE_DIR=${config}/var/lib/flux
export FLUX_OUTPUT_DIR=/tmp/fluxout
mkdir -p "${STATE_DIR}" "${FLUX_OUTPUT_DIR}" "${config}/etc/flux/system/cron.d"

cfg=${config}/etc/flux/config
lead="{{lead_host}}"
# Word-split on purpose: the original command arrives as one argument.
command="$*"
broker_options="-Scron.directory=${config}/etc/flux/system/cron.d \
  -Stbon.fanout=256 \
  -Srundir=${config}/run/flux \
  -Sstatedir=${STATE_DIR} -Slocal-uri=local://${config}/run/flux/local \
  -Slog-stderr-level=0 \
  -Slog-stderr-mode=local"

if [ "$(hostname)" = "${lead}" ]; then
    echo "Command: ${command}"
    if [ -z "${command}" ]; then
        # No command: an interactive Flux instance.
        echo "flux broker --config-path ${cfg} ${broker_options}"
        flux broker --config-path "${cfg}" ${broker_options}
        status=$?
    else
        flags="{{flags}}"
        echo "Flux flags: ${flags}"
        echo "flux start -o --config ${cfg} ${broker_options} flux run ${flags} ${command}"
        flux start -o --config "${cfg}" ${broker_options} flux run ${flags} ${command}
        status=$?
    fi
else
    # Followers retry until the lead's instance lets them finish cleanly.
    while true; do
        echo "flux start -o --config ${cfg} ${broker_options}"
        flux start -o --config "${cfg}" ${broker_options}
        status=$?
        if [ "${status}" -eq 0 ]; then
            echo "Flux follower exited cleanly."
            break
        fi
        echo "Flux follower exited with ${status}; retrying in 15s"
        sleep 15
    done
fi

touch "${shared}/flux-operator-complete.txt"
# The pod ends as the lead's Flux instance did (its job's status), so that a
# failed command fails the TrainJob.
exit "${status}"
