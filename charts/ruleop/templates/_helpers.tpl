{{/* The labels of every object: deploy/'s, and Helm's own (the drift test leaves these out). */}}
{{- define "ruleop.labels" -}}
app.kubernetes.io/name: ruleop
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Helm's labels alone, for objects deploy/ ships with no label. */}}
{{- define "ruleop.helmLabels" -}}
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
