{{/* The chart's name. */}}
{{- define "pgcorral.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "pgcorral.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The API Service's name. */}}
{{- define "pgcorral.apiName" -}}
{{- printf "%s-api" (include "pgcorral.fullname" . | trunc 59 | trimSuffix "-") }}
{{- end }}

{{- define "pgcorral.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pgcorral.labels" -}}
helm.sh/chart: {{ include "pgcorral.chart" . }}
{{ include "pgcorral.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pgcorral.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pgcorral.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pgcorral.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pgcorral.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the registry's connection string and the API's JWT secret. */}}
{{- define "pgcorral.secretName" -}}
{{- default (include "pgcorral.fullname" .) .Values.existingSecret }}
{{- end }}

{{- define "pgcorral.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Seconds from the order to stop to SIGKILL: longer than preStop's sleep and the drain. */}}
{{- define "pgcorral.terminationGracePeriodSeconds" -}}
{{- if .Values.terminationGracePeriodSeconds }}
{{- .Values.terminationGracePeriodSeconds }}
{{- else }}
{{- add .Values.drain.preStopSleepSeconds .Values.drain.seconds 15 }}
{{- end }}
{{- end }}

{{/*
pgcorral.toml. The registry and the JWT secret are not here: they come from the Secret, through
PGCORRAL_TENANT_REGISTRY and PGCORRAL_API_JWT_SECRET. Values are written with toJson, whose
strings, numbers, booleans and lists of them are TOML too.
*/}}
{{- define "pgcorral.config" -}}
{{- $c := .Values.config -}}
# Rendered by the pgcorral Helm chart; docs/configuration.md describes every key.
[general]
listen_addr = "0.0.0.0"
listen_port = {{ $c.listenPort | int }}
# The Unix socket (an emptyDir): the admin console stays reachable there during a drain.
unix_socket_dir = "/tmp"
api_listen = {{ printf "0.0.0.0:%d" ($c.apiPort | int) | toJson }}
metrics_addr = {{ printf "0.0.0.0:%d" ($c.metricsPort | int) | toJson }}
pool_mode = {{ $c.poolMode | toJson }}
default_pool_size = {{ $c.defaultPoolSize | int }}
max_client_conn = {{ $c.maxClientConn | int }}
auth_type = {{ $c.authType | toJson }}
workers = {{ $c.workers | int }}
# SIGINT's drain (drain.mode "servers") ends within this many milliseconds.
shutdown_timeout = {{ mul .Values.drain.seconds 1000 }}
{{- range $key, $value := $c.extraGeneral }}
{{ $key }} = {{ $value | toJson }}
{{- end }}
{{- with $c.extra }}

{{ . }}
{{- end }}
{{- end }}
