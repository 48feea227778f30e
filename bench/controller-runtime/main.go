// The origin's WebSite operator, written the way the kubebuilder articles write it: a
// typed WebSite, a reconciler that creates or updates a Deployment and a Service named
// <name>-web, and a status with readyReplicas and url (plus observedGeneration, which the
// benchmark waits on). Client QPS 1000 / burst 2000 so that it is not throttled, and 32
// concurrent reconciles, as ruleop uses.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

type WebSiteSpec struct {
	Image       string             `json:"image"`
	Replicas    *int32             `json:"replicas,omitempty"`
	Port        int32              `json:"port,omitempty"`
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`
}

type WebSiteStatus struct {
	ReadyReplicas      int32              `json:"readyReplicas"`
	URL                string             `json:"url,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

type WebSite struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WebSiteSpec   `json:"spec,omitempty"`
	Status            WebSiteStatus `json:"status,omitempty"`
}

type WebSiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebSite `json:"items"`
}

func (in *WebSite) DeepCopyObject() runtime.Object {
	out := *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Replicas != nil {
		r := *in.Spec.Replicas
		out.Spec.Replicas = &r
	}
	out.Status.Conditions = append([]metav1.Condition(nil), in.Status.Conditions...)
	return &out
}

func (in *WebSiteList) DeepCopyObject() runtime.Object {
	out := *in
	out.Items = make([]WebSite, len(in.Items))
	for i := range in.Items {
		out.Items[i] = *in.Items[i].DeepCopyObject().(*WebSite)
	}
	return &out
}

var gv = schema.GroupVersion{Group: "sre.example.com", Version: "v1alpha1"}

type WebSiteReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

func labels(name string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "website",
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/managed-by": "website-operator",
	}
}

func (r *WebSiteReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var site WebSite
	if err := r.Get(ctx, req.NamespacedName, &site); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	replicas := int32(2)
	if site.Spec.Replicas != nil {
		replicas = *site.Spec.Replicas
	}
	port := site.Spec.Port
	if port == 0 {
		port = 80
	}
	svcType := site.Spec.ServiceType
	if svcType == "" {
		svcType = corev1.ServiceTypeClusterIP
	}
	name := site.Name + "-web"
	sel := labels(site.Name)

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: site.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error {
		dep.Labels = labels(site.Name)
		dep.Spec.Replicas = &replicas
		dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
		dep.Spec.Template.Labels = labels(site.Name)
		dep.Spec.Template.Spec.Containers = []corev1.Container{{
			Name:  "web",
			Image: site.Spec.Image,
			Ports: []corev1.ContainerPort{{ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
		}}
		return controllerutil.SetControllerReference(&site, dep, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: site.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Labels = labels(site.Name)
		svc.Spec.Type = svcType
		svc.Spec.Selector = sel
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}
		return controllerutil.SetControllerReference(&site, svc, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}

	status := site.Status.DeepCopy()
	status.ReadyReplicas = dep.Status.ReadyReplicas
	status.URL = fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", name, site.Namespace, port)
	if svcType == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 && svc.Status.LoadBalancer.Ingress[0].IP != "" {
		status.URL = "http://" + svc.Status.LoadBalancer.Ingress[0].IP
	}
	status.ObservedGeneration = site.Generation
	if !equality.Semantic.DeepEqual(*status, site.Status) {
		site.Status = *status
		if err := r.Status().Update(ctx, &site); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{Requeue: true}, nil
			}
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

func (s *WebSiteStatus) DeepCopy() *WebSiteStatus {
	out := *s
	out.Conditions = append([]metav1.Condition(nil), s.Conditions...)
	return &out
}

func main() {
	namespace := flag.String("namespace", "", "watch only this namespace")
	flag.Parse()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	scheme.AddKnownTypes(gv, &WebSite{}, &WebSiteList{})
	metav1.AddToGroupVersion(scheme, gv)

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS = 1000
	cfg.Burst = 2000
	opts := ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}
	if *namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := &WebSiteReconciler{Client: mgr.GetClient(), Scheme: scheme}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&WebSite{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 32}).
		Complete(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("website-operator started")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
