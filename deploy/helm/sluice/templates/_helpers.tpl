{{/* The release's resource names. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* "sink" when the pipeline reads Kafka ([source.kafka]), else "source". */}}
{{- define "sluice.kind" -}}
{{- if regexMatch "(?m)^\\s*\\[source\\.kafka\\]" .Values.pipeline -}}sink{{- else -}}source{{- end -}}
{{- end -}}

{{/* Refuses what would not work, naming the value and the fix. */}}
{{- define "sluice.validate" -}}
{{- if not (trim .Values.pipeline) -}}
{{- fail "pipeline: give the pipeline file, e.g. --set-file pipeline=examples/postgres-to-kafka.toml" -}}
{{- end -}}
{{- if not (regexMatch "(?m)^\\s*listen\\s*=\\s*\"\\$\\{SLUICE_ADMIN[:}]" .Values.pipeline) -}}
{{- fail "pipeline: its [admin] listen must read SLUICE_ADMIN (listen = \"${SLUICE_ADMIN:-127.0.0.1:8089}\", as in the examples): the chart sets it so that probes and Prometheus reach the admin server" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (eq (include "sluice.kind" .) "source") (not (regexMatch "(?m)^\\s*state_store\\s*=\\s*\"kafka\"" .Values.pipeline)) -}}
{{- fail "replicas: more than one instance of a source pipeline needs state_store = \"kafka\" in the pipeline file (the standby reads the active instance's state from Kafka; docs/high-availability.md)" -}}
{{- end -}}
{{- if and .Values.persistence.enabled (gt (int .Values.replicas) 1) -}}
{{- fail "persistence.enabled: one ReadWriteOnce volume cannot serve several replicas; with replicas > 1 use state_store = \"kafka\" and no persistence" -}}
{{- end -}}
{{- end -}}
