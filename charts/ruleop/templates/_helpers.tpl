{{/* The standard labels of every object: deploy/'s (app.kubernetes.io/name), and Helm's
own (the drift test leaves these out). */}}
{{- define "ruleop.labels" -}}
app.kubernetes.io/name: ruleop
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "ruleop.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The rules files of the ConfigMap: the values' or the shipped ones (file name → text). */}}
{{- define "ruleop.rulesFiles" -}}
{{- $files := dict }}
{{- if .Values.rules }}
{{- $files = .Values.rules }}
{{- else }}
{{- range $path, $_ := .Files.Glob "files/rules/*.yaml" }}
{{- $_ := set $files (base $path) ($.Files.Get $path) }}
{{- end }}
{{- end }}
{{- toYaml $files }}
{{- end -}}

{{/* The name of this installation's objects: the release's name when it holds "ruleop"
(`helm install ruleop`: every name as deploy/ has it), else `<release>-ruleop`; or
`fullnameOverride`. Cluster-scoped objects carry it, so installations in different
namespaces (each with its rule selector) do not meet. */}}
{{- define "ruleop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains "ruleop" .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-ruleop" .Release.Name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end -}}

{{/* A name of deploy/ (`ruleop`, `ruleop-<part>`) as this installation's: (list $full $name).
The inventory ConfigMap keeps its name (ruleop's own, one per namespace). */}}
{{- define "ruleop.rename" -}}
{{- $full := index . 0 }}{{ $name := index . 1 }}
{{- if eq $name "ruleop" }}{{ $full }}
{{- else if and (hasPrefix "ruleop-" $name) (ne $name "ruleop-inventory") }}{{ $full }}{{ trimPrefix "ruleop" $name }}
{{- else }}{{ $name }}{{ end }}
{{- end -}}

{{/* The selector of ruleop's pods. */}}
{{- define "ruleop.selector" -}}
app.kubernetes.io/name: ruleop
{{- end -}}
