<?php
/**
 * Installs the WordPress test site (no wp-cli needed).
 *
 * Usage: php install.php /path/to/wordpress http://127.0.0.1:PORT
 * Environment: PGW_DB_HOST, PGW_DB_PORT, PGW_DB_NAME (echoed into the output).
 * Prints the site.json document (URL, users with application passwords,
 * database) on stdout; diagnostics go to stderr.
 */

if ( PHP_SAPI !== 'cli' ) {
	exit( 1 );
}
if ( $argc < 3 ) {
	fwrite( STDERR, "usage: php install.php WP_DIR URL\n" );
	exit( 2 );
}

$wp_dir = rtrim( $argv[1], '/' );
$url    = rtrim( $argv[2], '/' );
$parts  = parse_url( $url );

$_SERVER['HTTP_HOST']       = $parts['host'] . ( isset( $parts['port'] ) ? ':' . $parts['port'] : '' );
$_SERVER['SERVER_NAME']     = $parts['host'];
$_SERVER['SERVER_PORT']     = isset( $parts['port'] ) ? (string) $parts['port'] : '80';
$_SERVER['REQUEST_URI']     = '/wp-admin/install.php';
$_SERVER['SCRIPT_NAME']     = '/wp-admin/install.php';
$_SERVER['PHP_SELF']        = '/wp-admin/install.php';
$_SERVER['REQUEST_METHOD']  = 'GET';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
$_SERVER['REMOTE_ADDR']     = '127.0.0.1';

define( 'WP_INSTALLING', true );

// Keep stdout clean for the JSON document.
ob_start();
require $wp_dir . '/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';
require_once ABSPATH . 'wp-includes/class-wp-application-passwords.php';

function pgw_fail( $msg ) {
	$noise = ob_get_clean();
	if ( '' !== (string) $noise ) {
		fwrite( STDERR, $noise . "\n" );
	}
	fwrite( STDERR, 'install.php: ' . $msg . "\n" );
	exit( 1 );
}

// Never try to send mail (no sendmail here).
add_filter(
	'pre_wp_mail',
	static function () {
		return true;
	}
);

if ( is_blog_installed() ) {
	pgw_fail( 'database is not empty; up.sh must start from a fresh database' );
}

$result = wp_install( 'Gateway Test Site', 'admin', 'admin@example.com', false, '', wp_generate_password( 24, false ) );
if ( is_wp_error( $result ) || empty( $result['user_id'] ) ) {
	pgw_fail( 'wp_install failed' );
}
$admin_id = (int) $result['user_id'];

update_option( 'siteurl', $url );
update_option( 'home', $url );
update_option( 'blogdescription', 'Local test site for the publishing gateway' );
update_option( 'timezone_string', 'UTC' );
update_option( 'gmt_offset', 0 );

// Pretty permalinks (plain permalinks make /wp-json answer 301).
global $wp_rewrite;
$wp_rewrite->set_permalink_structure( '/%postname%/' );
$wp_rewrite->flush_rules( false );

$users = array( 'admin' => $admin_id );
foreach ( array( 'editor', 'author' ) as $role ) {
	$uid = wp_insert_user(
		array(
			'user_login'   => $role,
			'user_pass'    => wp_generate_password( 24, false ),
			'user_email'   => $role . '@example.com',
			'display_name' => ucfirst( $role ),
			'role'         => $role,
		)
	);
	if ( is_wp_error( $uid ) ) {
		pgw_fail( 'could not create user ' . $role . ': ' . $uid->get_error_message() );
	}
	$users[ $role ] = (int) $uid;
}

$out_users = array();
foreach ( $users as $name => $uid ) {
	$created = WP_Application_Passwords::create_new_application_password( $uid, array( 'name' => 'publishing-gateway-test' ) );
	if ( is_wp_error( $created ) ) {
		pgw_fail( 'could not create application password for ' . $name . ': ' . $created->get_error_message() );
	}
	$out_users[ $name ] = array(
		'username'     => get_userdata( $uid )->user_login,
		'app_password' => WP_Application_Passwords::chunk_password( $created[0] ),
		'id'           => $uid,
	);
}

// Not silent: the activation hook makes the plugin's postmeta index, as on a real site.
$activated = activate_plugin( 'publishing-gateway-companion/publishing-gateway-companion.php' );
if ( is_wp_error( $activated ) ) {
	pgw_fail( 'could not activate companion plugin: ' . $activated->get_error_message() );
}

$noise = ob_get_clean();
if ( '' !== trim( (string) $noise ) ) {
	fwrite( STDERR, $noise . "\n" );
}

echo json_encode(
	array(
		'url'      => $url,
		'users'    => $out_users,
		'database' => array(
			'host' => (string) getenv( 'PGW_DB_HOST' ),
			'port' => (int) getenv( 'PGW_DB_PORT' ),
			'name' => (string) getenv( 'PGW_DB_NAME' ),
		),
	),
	JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES
), "\n";
