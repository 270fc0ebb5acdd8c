{{/*
The labels Helm's conventions put on every object of a release; the objects
are otherwise those of manifests/ (host/tests/cluster/helm_chart.rs).
*/}}
{{- define "trainforge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/*
trainforge.object: one object (a dict) as a YAML document, with the
release's labels added, and `app.kubernetes.io/part-of: trainforge` when
.partOf (what manifests/ adds to its operator, webhook and public objects).
Arguments: dict "root" $ "obj" OBJECT "partOf" BOOL.
*/}}
{{- define "trainforge.object" -}}
{{- $obj := .obj -}}
{{- $meta := $obj.metadata -}}
{{- $labels := default (dict) $meta.labels -}}
{{- if .partOf }}{{- $_ := set $labels "app.kubernetes.io/part-of" "trainforge" -}}{{- end }}
{{- range $k, $v := include "trainforge.labels" .root | fromYaml }}{{- $_ := set $labels $k $v -}}{{- end }}
{{- $_ := set $meta "labels" $labels -}}
---
{{ toYaml $obj }}
{{ end }}

{{/*
trainforge.file: the objects of a copied manifests/ file (files/...), with
the namespace trainforge-system replaced by the release's. A document that
does not parse fails the render naming the file.
Arguments: dict "root" $ "file" PATH "partOf" BOOL.
*/}}
{{- define "trainforge.file" -}}
{{- $root := .root -}}
{{- $file := .file -}}
{{- $partOf := .partOf -}}
{{- $text := $root.Files.Get $file | replace "trainforge-system" $root.Release.Namespace -}}
{{- if not $text }}{{ fail (printf "chart file %s is missing or empty" $file) }}{{ end -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $file $obj.Error) }}{{ end }}
{{- if $obj }}
{{- include "trainforge.object" (dict "root" $root "obj" $obj "partOf" $partOf) }}
{{- end }}
{{- end }}
{{- end }}
