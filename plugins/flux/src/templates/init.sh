#!/bin/bash
# Flux installer (init container `flux-installer`, image FLUX_VIEW_IMAGE):
# writes this TrainJob's Flux configuration and copies the Flux view (a
# Spack view with Flux built in) into the shared volume /mnt/flux, from
# which the trainer container runs Flux (entrypoint.sh).
# Rendered for this TrainJob by the Trainforge Flux plugin.

# The view inside this image (github.com/converged-computing/flux-views).
export fluxroot=/opt/view
export PATH=${fluxroot}/bin:${PATH}
mkdir -p "${fluxroot}/bin"

shared=/mnt/flux
config=${shared}/config
echo "Flux installer on $(hostname): view ${fluxroot}, configuration under ${config}"

# Directories every broker expects: system config, cron, state, run, CURVE.
mkdir -p "${config}/etc/flux/system/cron.d" \
         "${config}/etc/flux/config" \
         "${config}/var/lib/flux" \
         "${config}/run/flux" \
         "${config}/etc/curve"

# The brokers of this TrainJob (the trainer container builds R from it).
echo "{{hosts}}" > "${config}/etc/flux/system/hostlist"

# Broker configuration (quoted here-document: written as is).
cat > "${config}/etc/flux/config/broker.toml" <<'FLUX_BROKER_TOML'
{{broker_config}}
FLUX_BROKER_TOML
echo "Flux broker configuration:"
cat "${config}/etc/flux/config/broker.toml"

# Copy the view and the software it links to (/opt/software, which the
# trainer container restores) into the shared volume.
mkdir -p "${shared}/view"
viewdir=/opt/views/._view/$(ls /opt/views/._view/)
echo "Copying the Flux view ${viewdir} to ${shared}/view"
cp -R "${viewdir}"/* "${shared}/view"
cp -R /opt/software "${shared}/"

touch "${shared}/flux-operator-done.txt"
echo "Flux installer done."
