// The image page (qkv/viz.h, render_image_html): grey images drawn on canvases with a
// transparent heat overlay over their patch grid, or with a point model's points and, on
// hover, a point's neighbours. Vanilla JavaScript and inline CSS, nothing fetched.
#include <cmath>
#include <string>

#include "common.h"
#include "qkv/error.h"

namespace qkv::viz {

namespace {

constexpr const char* kStyle = R"CSS(
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
header{padding:12px 20px;background:#fff;border-bottom:1px solid #ddd}
h1{font-size:18px;margin:0}.sub{margin:4px 0 0;color:#555}
#qkv-controls{padding:8px 20px;display:flex;flex-wrap:wrap;gap:16px;align-items:center}
#qkv-ramp{display:inline-block;width:140px;height:12px;vertical-align:middle;border:1px solid #bbb;margin:0 6px}
#qkv-cards{display:flex;flex-wrap:wrap;gap:14px;padding:8px 20px 20px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;width:232px}
.pic{position:relative;line-height:0}
.pic canvas{display:block;image-rendering:pixelated}
.pic canvas.heat{position:absolute;left:0;top:0;cursor:crosshair}
.cap{margin-top:6px;font-size:13px;word-wrap:break-word}.read{color:#555;font-size:12px;min-height:1.4em}
footer{padding:8px 20px;color:#777;font-size:12px}
#qkv-error{color:#b00020;padding:8px 20px}
)CSS";

// Each card holds two canvases of the same size, one over the other: the grey image as it
// is (canvas.image, never tinted), and over it the heat (canvas.heat, transparent where
// nothing is drawn). A value's tone t is its place between the image's smallest and largest
// value (0..1, each image on its own: a rollout is never far from uniform, so one scale for
// all would tint every patch alike); its colour is the ramp at t and its alpha t·opacity,
// so the patches the model weighs least leave the image untouched.
constexpr const char* kBody = R"HTML(<div id="qkv-controls"><label>Overlay <input id="qkv-opacity" type="range" min="0" max="100" value="70"></label>
<span class="read">least <span id="qkv-ramp"></span> most: each patch's or point's weight, from the image's smallest (transparent) to its largest; hover for its value (and a point's neighbours).</span></div>
<div id="qkv-error" hidden></div>
<noscript><p>The images are drawn by JavaScript, which is off. The numbers are in the
qkv-image-data element of this file.</p></noscript>
<main id="qkv-cards"></main>)HTML";

constexpr const char* kScript = R"JS(
(function(){
try{
var data=JSON.parse(document.getElementById('qkv-image-data').textContent);
var cards=document.getElementById('qkv-cards'),slider=document.getElementById('qkv-opacity');
// The colour ramp (low to high: deep blue, magenta, orange, yellow; the stops of matplotlib's
// plasma), linear between stops: [r, g, b] for t in [0, 1].
var STOPS=[[13,8,135],[126,3,168],[204,71,120],[248,149,64],[240,249,33]];
function ramp(t){
  var x=Math.min(1,Math.max(0,t))*(STOPS.length-1),i=Math.min(STOPS.length-2,Math.floor(x)),f=x-i;
  return [0,1,2].map(function(k){return Math.round(STOPS[i][k]+(STOPS[i+1][k]-STOPS[i][k])*f);});
}
document.getElementById('qkv-ramp').style.background='linear-gradient(to right,'+STOPS.map(function(c){return 'rgb('+c.join(',')+')';}).join(',')+')';
var draws=[];
data.images.forEach(function(im,n){
  var scale=Math.max(1,Math.floor(216/Math.max(im.width,im.height)));
  var card=document.createElement('div');card.className='card';
  var pic=document.createElement('div');pic.className='pic';
  var base=document.createElement('canvas'),c=document.createElement('canvas');
  base.className='image';c.className='heat';
  base.width=c.width=im.width*scale;base.height=c.height=im.height*scale;
  pic.appendChild(base);pic.appendChild(c);
  var cap=document.createElement('div');cap.className='cap';cap.textContent=im.caption;
  var read=document.createElement('div');read.className='read';
  card.appendChild(pic);card.appendChild(cap);card.appendChild(read);cards.appendChild(card);
  // The image, once: grey levels as they are, at full contrast.
  var bg=base.getContext('2d'),img=bg.createImageData(im.width,im.height);
  for(var i=0;i<im.width*im.height;i++){var p=im.pixels[i];img.data[4*i]=p;img.data[4*i+1]=p;img.data[4*i+2]=p;img.data[4*i+3]=255;}
  var tmp=document.createElement('canvas');tmp.width=im.width;tmp.height=im.height;tmp.getContext('2d').putImageData(img,0,0);
  bg.imageSmoothingEnabled=false;bg.drawImage(tmp,0,0,base.width,base.height);
  var pts=!!im.points,vals=pts?im.point_heat:im.heat,hover=-1;
  var max=-Infinity,min=Infinity;vals.forEach(function(v){if(v>max)max=v;if(v<min)min=v;});
  function tone(v){return max>min?(v-min)/(max-min):0;}
  function rgba(t,alpha){var r=ramp(t);return 'rgba('+r[0]+','+r[1]+','+r[2]+','+alpha.toFixed(3)+')';}
  var ph=pts?1:im.height/im.grid_h,pw=pts?1:im.width/im.grid_w;
  function draw(){
    var g=c.getContext('2d'),op=slider.value/100;
    g.clearRect(0,0,c.width,c.height);
    if(!pts){
      for(var y=0;y<im.grid_h;y++)for(var x=0;x<im.grid_w;x++){
        var t=tone(im.heat[y*im.grid_w+x]);
        if(t<=0)continue;  // the least-weighed patch: the image alone
        g.fillStyle=rgba(t,t*op);
        var x0=Math.round(x*pw*scale),y0=Math.round(y*ph*scale);
        g.fillRect(x0,y0,Math.round((x+1)*pw*scale)-x0,Math.round((y+1)*ph*scale)-y0);
      }
      return;
    }
    // Points at pixel centres, coloured by the attention they receive.
    var P=im.point_heat.length,cx=function(n){return (im.points[2*n]+0.5)*scale;},cy=function(n){return (im.points[2*n+1]+0.5)*scale;};
    if(hover>=0){
      for(var k=0;k<im.neighbors;k++){
        var j=im.neighbor[hover*im.neighbors+k],w=im.neighbor_weight[hover*im.neighbors+k];
        g.strokeStyle='rgba(0,200,255,'+Math.min(1,0.15+w*1.5).toFixed(3)+')';g.lineWidth=1+4*w;
        g.beginPath();g.moveTo(cx(hover),cy(hover));g.lineTo(cx(j),cy(j));g.stroke();
      }
    }
    for(var n=0;n<P;n++){
      g.fillStyle=rgba(tone(im.point_heat[n]),0.25+0.75*op);
      g.beginPath();g.arc(cx(n),cy(n),n===hover?4:2.5,0,2*Math.PI);g.fill();
    }
  }
  c.addEventListener('mousemove',function(e){
    var r=c.getBoundingClientRect();
    if(pts){
      var px=(e.clientX-r.left)/r.width*im.width-0.5,py=(e.clientY-r.top)/r.height*im.height-0.5,best=-1,bd=Infinity;
      for(var n=0;n<im.point_heat.length;n++){var dx=im.points[2*n]-px,dy=im.points[2*n+1]-py,d=dx*dx+dy*dy;if(d<bd){bd=d;best=n;}}
      if(best!==hover){hover=best;draw();}
      if(best>=0)read.textContent='point '+best+' (row '+im.points[2*best+1].toFixed(0)+', column '+im.points[2*best].toFixed(0)+'): receives '+im.point_heat[best].toPrecision(3)+(im.neighbors?'; lines: its '+im.neighbors+' neighbours, by its attention':'');
      return;
    }
    var x=Math.floor((e.clientX-r.left)/r.width*im.grid_w),y=Math.floor((e.clientY-r.top)/r.height*im.grid_h);
    if(x>=0&&y>=0&&x<im.grid_w&&y<im.grid_h)read.textContent='patch (row '+y+', column '+x+'): '+im.heat[y*im.grid_w+x].toPrecision(3);
  });
  c.addEventListener('mouseleave',function(){read.textContent='';if(pts&&hover>=0){hover=-1;draw();}});
  draws.push(draw);draw();
});
slider.addEventListener('input',function(){draws.forEach(function(d){d();});});
document.body.dataset.rendered='1';
}catch(err){var e=document.getElementById('qkv-error');e.hidden=false;e.textContent='qkv: '+err;}
})();
)JS";

}  // namespace

std::string render_image_html(const ImageAttentionView& view) {
  QKV_CHECK(!view.images.empty(), "render_image_html: no images");
  std::string data = "{\"title\":" + detail::json_string(view.title) +
                     ",\"subtitle\":" + detail::json_string(view.subtitle) + ",\"images\":[";
  for (std::size_t n = 0; n < view.images.size(); ++n) {
    const ImageAttention& im = view.images[n];
    const std::string where = "render_image_html: image " + std::to_string(n);
    QKV_CHECK(im.height >= 1 && im.width >= 1 &&
                  static_cast<std::int64_t>(im.pixels.size()) == im.height * im.width,
              where << ": " << im.pixels.size() << " pixels for " << im.height << "x" << im.width);
    const bool points = !im.points.empty();
    QKV_CHECK(points != (im.grid_h > 0 || !im.heat.empty()),
              where << ": give either a patch grid with heat values or points, not " << (points ? "both" : "neither"));
    const std::vector<float>& heat = points ? im.point_heat : im.heat;
    if (!points) {
      QKV_CHECK(im.grid_h >= 1 && im.grid_w >= 1 && im.grid_h <= im.height && im.grid_w <= im.width &&
                    static_cast<std::int64_t>(im.heat.size()) == im.grid_h * im.grid_w,
                where << ": " << im.heat.size() << " heat values for a " << im.grid_h << "x" << im.grid_w
                      << " grid over " << im.height << "x" << im.width << " pixels");
    } else {
      const std::int64_t P = static_cast<std::int64_t>(im.points.size() / 2), K = im.neighbors;
      QKV_CHECK(im.points.size() % 2 == 0 && static_cast<std::int64_t>(im.point_heat.size()) == P,
                where << ": " << im.points.size() << " point coordinates and " << im.point_heat.size()
                      << " heat values (need 2 per point and 1 per point)");
      for (std::int64_t k = 0; k < P; ++k) {
        const float x = im.points[static_cast<std::size_t>(2 * k)], y = im.points[static_cast<std::size_t>(2 * k + 1)];
        QKV_CHECK(std::isfinite(x) && std::isfinite(y) && x >= 0 && y >= 0 && x <= static_cast<float>(im.width - 1) &&
                      y <= static_cast<float>(im.height - 1),
                  where << ": point " << k << " at (" << x << ", " << y << ") is outside the " << im.width << "x"
                        << im.height << " image");
      }
      QKV_CHECK(K >= 0 && static_cast<std::int64_t>(im.neighbor.size()) == P * K &&
                    static_cast<std::int64_t>(im.neighbor_weight.size()) == P * K,
                where << ": " << im.neighbor.size() << " neighbours and " << im.neighbor_weight.size()
                      << " weights for " << P << " points x " << K);
      for (std::size_t k = 0; k < im.neighbor.size(); ++k) {
        QKV_CHECK(im.neighbor[k] >= 0 && im.neighbor[k] < P,
                  where << ": neighbour " << k << " is point " << im.neighbor[k] << ", outside [0, " << P << ")");
        QKV_CHECK(im.neighbor_weight[k] >= 0.0f && im.neighbor_weight[k] <= 1.0f,
                  where << ": neighbour weight " << k << " is " << im.neighbor_weight[k] << " (must be in [0, 1])");
      }
    }
    for (std::size_t k = 0; k < heat.size(); ++k)
      QKV_CHECK(std::isfinite(heat[k]) && heat[k] >= 0.0f,
                where << ": heat value " << k << " is " << heat[k] << " (must be finite and >= 0)");
    if (n) data += ',';
    data += "{\"caption\":" + detail::json_string(im.caption) + ",\"height\":" + std::to_string(im.height) +
            ",\"width\":" + std::to_string(im.width) + ",\"grid_h\":" + std::to_string(im.grid_h) +
            ",\"grid_w\":" + std::to_string(im.grid_w) + ",\"pixels\":[";
    for (std::size_t k = 0; k < im.pixels.size(); ++k) {
      if (k) data += ',';
      data += std::to_string(im.pixels[k]);
    }
    const auto append_floats = [&](const char* key, const std::vector<float>& values) {
      data += std::string("],\"") + key + "\":[";
      for (std::size_t k = 0; k < values.size(); ++k) {
        if (k) data += ',';
        detail::append_number(data, values[k]);
      }
    };
    if (!points) {
      append_floats("heat", im.heat);
    } else {
      append_floats("points", im.points);
      append_floats("point_heat", im.point_heat);
      append_floats("neighbor_weight", im.neighbor_weight);
      data += "],\"neighbors\":" + std::to_string(im.neighbors) + ",\"neighbor\":[";
      for (std::size_t k = 0; k < im.neighbor.size(); ++k) {
        if (k) data += ',';
        data += std::to_string(im.neighbor[k]);
      }
    }
    data += "]}";
  }
  data += "]}";

  return detail::self_contained_page(view.title, "where the model looked", view.subtitle, kStyle, kBody,
                                     "qkv-image-data", data, kScript);
}

}  // namespace qkv::viz
