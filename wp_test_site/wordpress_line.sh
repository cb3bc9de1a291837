# Which WordPress the test site serves, sourced by up.sh, down.sh and companion.sh (HERE set):
#   WP_TEST_SITE_WORDPRESS=bookworm  Debian 12's package, installed with apt (the default)
#   WP_TEST_SITE_WORDPRESS=trixie    Debian 13's package (the 6.8 line)
#   WP_TEST_SITE_WORDPRESS=sid       Debian unstable's package (the newest line: 7.1 when written)
# trixie's and sid's packages are fetched with `apt-get download` through a private sources list
# (the Debian archive this machine's apt sources name), unpacked with `dpkg-deb -x` into a cache
# folder and never installed; nothing of the system's apt configuration changes. Each line has
# its own runtime folder (RT), and so its own database, web root and port: two lines can be up
# at once.
#   WP_TEST_SITE_INSTANCE=NAME       a second site of the same line, in RT-NAME (the tests'
#                                    site-wide changes run on one named "exclusive")
WP_LINE="${WP_TEST_SITE_WORDPRESS:-bookworm}"
case "$WP_LINE" in
bookworm) RT="$HERE/.runtime" ;;
trixie | sid) RT="$HERE/.runtime-$WP_LINE" ;;
*)
	echo "ERROR: WP_TEST_SITE_WORDPRESS must be bookworm, trixie or sid, not '$WP_LINE'" >&2
	exit 2
	;;
esac
WP_INSTANCE="${WP_TEST_SITE_INSTANCE:-}"
if [[ -n "$WP_INSTANCE" ]]; then
	[[ "$WP_INSTANCE" =~ ^[a-z0-9][a-z0-9-]*$ ]] || {
		echo "ERROR: WP_TEST_SITE_INSTANCE must be lowercase letters, digits and dashes, not '$WP_INSTANCE'" >&2
		exit 2
	}
	RT="$RT-$WP_INSTANCE"
fi
# The release line each Debian suite carried when this was written: a newer one is said plainly.
declare -A WP_EXPECTED_LINE=([bookworm]=6.1 [trixie]=6.8 [sid]=7.1)
WP_CACHE="${WP_TEST_SITE_CACHE:-/var/cache/publishing-gateway/wordpress-$WP_LINE}"
# The packages the wordpress package's symlinks point into (wp-includes/js, PHPMailer, ID3).
WP_PACKAGES=(wordpress libphp-phpmailer php-getid3 libjs-jquery-ui libjs-lodash libjs-underscore libjs-cropper)
