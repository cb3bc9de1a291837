<?php
/**
 * Router for PHP's built-in web server (php -S ... router.php).
 *
 * Existing files (and directories that have an index.php) are served by the
 * built-in server itself (return false). Everything else -- including URLs
 * whose last path segment contains a dot -- goes to WordPress's index.php,
 * like Apache's standard WordPress rewrite rules, so pretty permalinks and
 * /wp-json/... work.
 */

$pgw_root = realpath( $_SERVER['DOCUMENT_ROOT'] );
$pgw_path = parse_url( $_SERVER['REQUEST_URI'], PHP_URL_PATH );
$pgw_path = is_string( $pgw_path ) ? rawurldecode( $pgw_path ) : '/';

if ( false !== $pgw_root && false === strpos( $pgw_path, "\0" ) ) {
	$pgw_full = realpath( $pgw_root . $pgw_path );
	if ( false !== $pgw_full && ( $pgw_full === $pgw_root || 0 === strpos( $pgw_full, $pgw_root . DIRECTORY_SEPARATOR ) ) ) {
		if ( is_file( $pgw_full ) ) {
			return false;
		}
		if ( is_dir( $pgw_full ) && is_file( $pgw_full . DIRECTORY_SEPARATOR . 'index.php' ) ) {
			if ( '/' !== substr( $pgw_path, -1 ) && in_array( $_SERVER['REQUEST_METHOD'], array( 'GET', 'HEAD' ), true ) ) {
				$pgw_query = parse_url( $_SERVER['REQUEST_URI'], PHP_URL_QUERY );
				header( 'Location: ' . $pgw_path . '/' . ( $pgw_query ? '?' . $pgw_query : '' ), true, 301 );
				return true;
			}
			return false;
		}
	}
}

$_SERVER['SCRIPT_FILENAME'] = $pgw_root . '/index.php';
$_SERVER['SCRIPT_NAME']     = '/index.php';
$_SERVER['PHP_SELF']        = '/index.php';
unset( $pgw_root, $pgw_path, $pgw_full, $pgw_query );
chdir( $_SERVER['DOCUMENT_ROOT'] );
require $_SERVER['SCRIPT_FILENAME'];
